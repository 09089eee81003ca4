"""Pickle weights (`pytorch_model.bin`), read only on the user's explicit request.

Unpickling can run arbitrary code, so this module is reached only with allow_pickle, and even then
through `torch.load(weights_only=True)`, which refuses anything but tensors and plain containers. Each
file is staged as safetensors (memory-mapped load, one tensor written at a time) so the rest of the
converter sees one format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafting.checkpoint.errors import CheckpointError
from drafting.checkpoint.safetensors_io import MemoryBytes, OutputTensor, write_file
from drafting.checkpoint.source import DraftCheckpoint, open_checkpoint, pickle_files, read_json

_TORCH_TO_SAFETENSORS = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}  # fmt: skip

# Wrappers trainers put around the state dict (DeepSpeed `module`, Lightning `state_dict`).
_WRAPPER_KEYS = ("state_dict", "module", "model")


@dataclass(frozen=True)
class _TensorBytes:
    """A tensor's bytes, materialised only while it is written."""

    tensor: Any
    nbytes: int

    def write_to(self, out_fd: int) -> None:
        flat = self.tensor.detach().contiguous().reshape(-1).view(dtype=_uint8())
        MemoryBytes(memoryview(flat.numpy()), self.nbytes).write_to(out_fd)


def _uint8() -> Any:
    import torch

    return torch.uint8


def stage_pickle_checkpoint(folder: Path, staging: Path) -> DraftCheckpoint:
    """Convert every pickle file of `folder` into safetensors under `staging`; open the result."""
    config = read_json(folder / "config.json", "config.json")
    files = pickle_files(folder)
    if not files:
        raise CheckpointError(f"{folder}: no pickle weights (*.bin, *.pt, *.pth) to read", path=folder)
    staging.mkdir(parents=True)
    (staging / "config.json").write_text(_json(config), encoding="utf-8")
    for number, path in enumerate(files):
        state = _load_state_dict(path)
        tensors = [_output(path, name, value) for name, value in sorted(state.items())]
        write_file(staging / f"{number:05d}-{path.stem}.safetensors", tensors, fsync=False)
        del state, tensors
    staged = open_checkpoint(staging)
    staged.folder = folder
    staged.config_path = folder / "config.json"
    return staged


def _json(config: dict[str, Any]) -> str:
    import json

    return json.dumps(config, indent=2)


def _load_state_dict(path: Path) -> dict[str, Any]:
    import pickle

    import torch

    try:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (non-zip) torch.save format cannot be memory-mapped
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        raise CheckpointError(f"{path}: cannot load as a weights-only pickle: {exc}", path=path) from exc
    return _unwrap(path, loaded)


def _unwrap(path: Path, loaded: Any) -> dict[str, Any]:
    import torch

    while isinstance(loaded, dict) and len(loaded) == 1 and next(iter(loaded)) in _WRAPPER_KEYS:
        loaded = next(iter(loaded.values()))
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise CheckpointError(f"{path}: does not hold a flat name -> tensor state dict", path=path)
    return loaded


def _output(path: Path, name: str, tensor: Any) -> OutputTensor:
    dtype = _TORCH_TO_SAFETENSORS.get(str(tensor.dtype).removeprefix("torch."))
    if dtype is None:
        raise CheckpointError(f"{path}: tensor {name!r} has dtype {tensor.dtype}, not storable", path=path)
    nbytes = tensor.numel() * tensor.element_size()
    return OutputTensor(str(name), dtype, tuple(tensor.shape), _TensorBytes(tensor, nbytes))
