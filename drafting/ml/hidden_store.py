"""The on-disk layout of an extraction, shared by `extract` (writer) and `train` (reader).

It is speculators' offline layout, so speculators' trainer can read an eyas extraction as it is:

    <output>/                          HF dataset (`save_to_disk`): input_ids, loss_mask, seq_len
    <output>/hidden_states/hs_{i}.safetensors   row i: token_ids [seq] int64, hidden_states [seq, 4, T]
    <output>/token_freq.pt             {token_id: count} over loss-masked tokens
    <output>/eyas_manifest.json        eyas's record: target, tokenizer, layers, dtype, counts, bytes

`hidden_states[:, 0:3]` are the aux states at the manifest's `aux_layers` (HF indices), and
`hidden_states[:, 3]` is the final decoder layer's output before the final norm.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import torch

from drafting.userfiles import Cap, check_regular, open_user_file, read_user_json_object

MANIFEST = "eyas_manifest.json"
TOKEN_FREQ = "token_freq.pt"
HIDDEN_DIR = "hidden_states"
MANIFEST_FORMAT = "eyas.hidden_states/1"
STATES_PER_TOKEN = 4
_ST_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int64: "I64"}
_TMP_MARK = ".tmp-"


def hidden_path(output: Path, index: int) -> Path:
    return Path(output) / HIDDEN_DIR / f"hs_{index}.safetensors"


def bytes_per_token(hidden_size: int, dtype: torch.dtype) -> int:
    """4 states of H values each, plus the int64 token id speculators' layout stores beside them."""
    return STATES_PER_TOKEN * hidden_size * dtype.itemsize + 8


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor], *, durable: bool = False) -> int:
    """Write a safetensors file straight from tensor memory (no serialised copy), atomically; returns bytes.

    The format is an 8-byte little-endian header length, a JSON header padded to 8 bytes, then raw data.
    Writing it here lets several threads stream large tensors to disk without holding the GIL on a copy.
    `durable` flushes the data to the disk before the file is renamed into place.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _ST_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    tmp = path.with_name(f"{path.name}{_TMP_MARK}{os.getpid()}")
    with tmp.open("wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for tensor in tensors.values():
            handle.write(tensor.contiguous().view(torch.uint8).numpy().data)
        if durable:
            handle.flush()
            os.fdatasync(handle.fileno())
    os.replace(tmp, path)
    return 8 + len(encoded) + offset


def read_header(path: Path) -> dict[str, Any] | None:
    """The safetensors header, or None when the file is missing, torn or shorter than it declares."""
    try:
        with open_user_file(path, Cap.WEIGHTS, "hidden states") as handle:  # UserFileError is a ValueError
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > Cap.HEADER:
                return None
            header: dict[str, Any] = json.loads(handle.read(length))
            size = os.fstat(handle.fileno()).st_size
        data_end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if size != 8 + length + data_end:
            return None
        return header
    except (OSError, ValueError, struct.error, KeyError, TypeError, AttributeError):
        return None


def is_complete(path: Path, seq_len: int, hidden_size: int) -> bool:
    header = read_header(path)
    if header is None:
        return False
    states, ids = header.get("hidden_states", {}), header.get("token_ids", {})
    return bool(
        states.get("shape") == [seq_len, STATES_PER_TOKEN, hidden_size] and ids.get("shape") == [seq_len]
    )


def remove_stale_temporaries(output: Path) -> int:
    """Partial files a killed run left behind (writes go to a temporary name first)."""
    removed = 0
    folder = Path(output) / HIDDEN_DIR
    for path in folder.glob(f"*{_TMP_MARK}*") if folder.exists() else []:
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def read_manifest(output: Path) -> dict[str, Any] | None:
    path = Path(output) / MANIFEST
    if not os.path.lexists(path):
        return None
    return read_user_json_object(path, Cap.CONFIG, MANIFEST)


def write_manifest(output: Path, manifest: dict[str, Any]) -> None:
    path = Path(output) / MANIFEST
    tmp = path.with_name(f"{path.name}{_TMP_MARK}{os.getpid()}")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_sample(output: Path, index: int) -> dict[str, torch.Tensor]:
    """Row i's `token_ids` [seq] and `hidden_states` [seq, 4, T] (memory-mapped by safetensors)."""
    from safetensors.torch import load_file

    path = hidden_path(output, index)
    check_regular(path, Cap.WEIGHTS, "hidden states")  # safetensors' open would wait on a FIFO
    return load_file(str(path))
