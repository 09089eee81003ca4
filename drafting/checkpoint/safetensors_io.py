"""Reading and writing the safetensors format without loading tensors.

A safetensors file is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
data_offsets relative to the end of the header) and the raw bytes. Reading only headers lets the doctor
check a 100 GB checkpoint in milliseconds; writing the format by hand lets fix_keys copy each tensor's
bytes straight from the source file (kernel-side `copy_file_range`), so memory stays flat whatever the
checkpoint's size.
"""

from __future__ import annotations

import errno
import json
import math
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from drafting.checkpoint.errors import CheckpointError
from drafting.userfiles import UserFileError, open_user_file

DTYPE_BYTES: dict[str, int] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}  # fmt: skip
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})
INTEGER_DTYPES = frozenset({"I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8"})

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library's own limit
_ANY_SIZE = 1 << 62  # weights are only required to be regular files; their size is the header's business
_COPY_CHUNK = 64 * 1024 * 1024  # per copy_file_range call / fallback read


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor's bytes lie: enough to check it or copy it, never its values."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    start: int  # absolute offset of the first byte in `file`
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Parse and validate a safetensors header; CheckpointError (naming the file) when it is broken."""
    try:
        # A FIFO or device named *.safetensors would block or never end: refused before reading.
        with open_user_file(path, _ANY_SIZE, "safetensors file") as fh:
            size = os.fstat(fh.fileno()).st_size
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"{path}: {size} bytes, too short to be safetensors", path=path)
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(MAX_HEADER_BYTES, size - 8):
                raise CheckpointError(
                    f"{path}: header length {header_len} exceeds the file ({size} bytes): "
                    "truncated, or not a safetensors file",
                    path=path,
                )
            raw = fh.read(header_len)
    except UserFileError as exc:
        raise CheckpointError(f"{path}: {exc.reason}", path=path) from exc
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror}", path=path) from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: header is not valid JSON ({exc}): corrupt file", path=path) from exc
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not a JSON object: corrupt file", path=path)
    data_start = 8 + header_len
    entries = {}
    for name, spec in header.items():
        if name != "__metadata__":
            entries[name] = _entry(path, name, spec, data_start, size)
    return entries


def _entry(path: Path, name: str, spec: Any, data_start: int, file_size: int) -> TensorEntry:
    try:
        dtype = str(spec["dtype"])
        shape = tuple(int(d) for d in spec["shape"])
        begin, end = (int(o) for o in spec["data_offsets"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: malformed header entry for {name!r}: corrupt file", path=path
        ) from exc
    if dtype not in DTYPE_BYTES:
        raise CheckpointError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}", path=path)
    expected = math.prod(shape) * DTYPE_BYTES[dtype]
    if any(d < 0 for d in shape) or begin < 0 or end - begin != expected:
        raise CheckpointError(
            f"{path}: tensor {name!r} {dtype}{list(shape)} needs {expected} bytes but the header "
            f"gives offsets {begin}..{end}: corrupt file",
            path=path,
        )
    if data_start + end > file_size:
        raise CheckpointError(
            f"{path}: tensor {name!r} ends at byte {data_start + end} but the file has {file_size} "
            "bytes: truncated file",
            path=path,
        )
    return TensorEntry(name, dtype, shape, path, data_start + begin, end - begin)


def read_bytes(entry: TensorEntry) -> bytes:
    """One tensor's raw bytes (used for the small d2t map only)."""
    with entry.file.open("rb") as fh:
        fh.seek(entry.start)
        data = fh.read(entry.nbytes)
    if len(data) != entry.nbytes:
        raise CheckpointError(f"{entry.file}: tensor {entry.name!r} is cut short", path=entry.file)
    return data


class ByteSource(Protocol):
    """Bytes of one output tensor: copied from a file range, or from memory (pickle input)."""

    @property
    def nbytes(self) -> int: ...

    def write_to(self, out_fd: int) -> None: ...


@dataclass(frozen=True)
class FileRange:
    file: Path
    start: int
    nbytes: int

    def write_to(self, out_fd: int) -> None:
        with self.file.open("rb") as src:
            _copy_range(src.fileno(), out_fd, self.start, self.nbytes, self.file)


@dataclass(frozen=True)
class MemoryBytes:
    data: memoryview
    nbytes: int

    def write_to(self, out_fd: int) -> None:
        view = self.data
        while view:
            written = os.write(out_fd, view[:_COPY_CHUNK])
            view = view[written:]


@dataclass(frozen=True)
class OutputTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    source: ByteSource


def _copy_range(src_fd: int, out_fd: int, offset: int, count: int, path: Path) -> None:
    """Copy count bytes at offset to the output's current position, in the kernel where it can."""
    use_kernel = hasattr(os, "copy_file_range")
    while count > 0:
        step = min(count, _COPY_CHUNK)
        if use_kernel:
            try:
                done = os.copy_file_range(src_fd, out_fd, step, offset)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                use_kernel = False
                continue
        else:
            chunk = os.pread(src_fd, step, offset)
            done = len(chunk)
            if done:
                MemoryBytes(memoryview(chunk), done).write_to(out_fd)
        if done == 0:
            raise CheckpointError(f"{path}: ended early while copying (file changed or truncated)", path=path)
        offset += done
        count -= done


def encode_header(tensors: Iterable[OutputTensor], metadata: dict[str, str] | None = None) -> bytes:
    """The length prefix and JSON header for tensors laid out in the given order (8-byte aligned)."""
    header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for tensor in tensors:
        size = tensor.source.nbytes
        header[tensor.name] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_file(
    path: Path,
    tensors: list[OutputTensor],
    *,
    fsync: bool = True,
    on_tensor: Callable[[OutputTensor], None] | None = None,
) -> int:
    """Write one safetensors file, one tensor at a time; returns its size in bytes.

    fsync makes the bytes durable before the caller renames the folder into place (a crash must never
    leave a complete-looking checkpoint with holes). Handing finished ranges to a writeback thread was
    tried and measured no faster on this disk, so the file is synced once at the end.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        header = encode_header(tensors)
        MemoryBytes(memoryview(header), len(header)).write_to(fd)
        for tensor in tensors:
            tensor.source.write_to(fd)
            if on_tensor is not None:
                on_tensor(tensor)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return path.stat().st_size


def split_into_shards(tensors: list[OutputTensor], max_shard_bytes: int) -> list[list[OutputTensor]]:
    """Greedy split in order; a tensor larger than the limit gets a shard of its own."""
    shards: list[list[OutputTensor]] = [[]]
    used = 0
    for tensor in tensors:
        if shards[-1] and used + tensor.source.nbytes > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(tensor)
        used += tensor.source.nbytes
    return shards


def shard_names(count: int) -> Iterator[str]:
    if count == 1:
        yield "model.safetensors"
        return
    for i in range(1, count + 1):
        yield f"model-{i:05d}-of-{count:05d}.safetensors"
