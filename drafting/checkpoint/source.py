"""Opening a drafter checkpoint folder: its config and where every tensor lies (headers only)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafting.checkpoint.errors import CheckpointError, PickleWeightsError
from drafting.checkpoint.safetensors_io import TensorEntry, read_header
from drafting.userfiles import Cap, UserFileError, read_user_json

INDEX_NAME = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth")


@dataclass
class DraftCheckpoint:
    """A drafter on disk: its config.json and the header entry of every tensor."""

    folder: Path
    config: dict[str, Any]
    config_path: Path
    tensors: dict[str, TensorEntry]
    weight_files: list[Path]
    index_path: Path | None = None

    @property
    def total_bytes(self) -> int:
        return sum(entry.nbytes for entry in self.tensors.values())


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from a regular file of at most Cap.CONFIG bytes, or CheckpointError naming the file.

    A FIFO, a device (`/dev/zero`), a folder or an oversized file is refused before a byte is read.
    """
    try:
        value = read_user_json(path, Cap.CONFIG, what)
    except UserFileError as exc:
        raise CheckpointError(f"{path}: {exc.reason}", path=path) from exc
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: {what} is not a JSON object", path=path)
    return value


def pickle_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in PICKLE_SUFFIXES)


def open_checkpoint(folder: Path) -> DraftCheckpoint:
    """Read config.json and every safetensors header; CheckpointError for anything unusable.

    Pickle weights (`pytorch_model.bin`) are refused here: reading them means unpickling, which
    `open_pickle_checkpoint` does only on explicit request.
    """
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder", path=folder)
    config_path = folder / "config.json"
    config = read_json(config_path, "config.json")
    index_path = folder / INDEX_NAME
    if index_path.exists():
        tensors, files = _read_indexed(index_path)
    else:
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise _no_safetensors(folder)
        tensors = _merge_headers(files)
    return DraftCheckpoint(
        folder, config, config_path, tensors, files, index_path if index_path.exists() else None
    )


def _no_safetensors(folder: Path) -> CheckpointError:
    pickles = pickle_files(folder)
    if pickles:
        names = ", ".join(p.name for p in pickles)
        return PickleWeightsError(
            f"{folder}: weights are pickle files ({names}), not safetensors. Pickles can run code when "
            "loaded, so eyas reads them only with allow_pickle (then torch.load(weights_only=True))",
            path=pickles[0],
        )
    return CheckpointError(f"{folder}: no *.safetensors weights and no {INDEX_NAME}", path=folder)


def _merge_headers(files: list[Path]) -> dict[str, TensorEntry]:
    tensors: dict[str, TensorEntry] = {}
    for path in files:
        for name, entry in read_header(path).items():
            if name in tensors:
                raise CheckpointError(
                    f"{path}: tensor {name!r} also appears in {tensors[name].file.name}", path=path
                )
            tensors[name] = entry
    return tensors


def _read_indexed(index_path: Path) -> tuple[dict[str, TensorEntry], list[Path]]:
    """Tensors of a sharded checkpoint; the index and the shard headers must agree exactly."""
    index = read_json(index_path, "safetensors index")
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path}: no 'weight_map' object", path=index_path)
    files = sorted({index_path.parent / str(name) for name in weight_map.values()})
    for path in files:
        if not path.is_file():
            raise CheckpointError(f"{index_path}: lists shard {path.name}, which does not exist", path=path)
    tensors = _merge_headers(files)
    for name, shard in weight_map.items():
        entry = tensors.get(name)
        if entry is None or entry.file.name != shard:
            raise CheckpointError(
                f"{index_path}: maps {name!r} to {shard}, but that shard has no such tensor", path=index_path
            )
    unlisted = sorted(set(tensors) - set(weight_map))
    if unlisted:
        raise CheckpointError(
            f"{index_path}: missing index entry for {unlisted[0]!r} (in {tensors[unlisted[0]].file.name})"
            + (f" and {len(unlisted) - 1} more" if len(unlisted) > 1 else ""),
            path=index_path,
        )
    return tensors, files
