"""The header of a GGUF file (its metadata and tensor list), read without loading any tensor data.

A real target is checked against what its recipe expects before the minutes of conversion start: the
architecture, the block count, the hidden size and the vocabulary (the token embedding's shape), and
whether the head is tied to the embedding (a GGUF with an `output.weight` tensor has a head of its own:
transformers then builds the model untied, modeling_gguf_pytorch_utils.load_gguf_checkpoint).

The layout is GGUF version 2/3's (ggml's gguf.h, as the `gguf` package's GGUFReader reads it): magic
"GGUF", u32 version, u64 tensor count, u64 key-value count, the key-value pairs, then per tensor its name,
u32 dimension count, u64 dimensions (ggml order: the fastest-varying first), u32 type and u64 offset. All
little-endian. The header is read from a stream, so a GGUF split over several files is read across them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

MAGIC = b"GGUF"
# value type -> struct format of a scalar (GGUF's gguf_type; 8 string and 9 array are read apart)
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
MAX_HEADER_ITEMS = 10_000_000  # a count past this is a corrupt header, not a model
MAX_STRING_BYTES = 1 << 24


class GgufHeaderError(ValueError):
    """The bytes are not a GGUF header (wrong magic, truncated, counts no model has)."""


@dataclass(frozen=True)
class GgufHeader:
    version: int
    metadata: dict[str, Any]  # arrays of more than ARRAY_KEPT items are kept as their length only
    tensors: dict[str, tuple[int, ...]]  # name -> shape in ggml order (e.g. token_embd: (hidden, vocab))

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    def arch_value(self, key: str) -> Any:
        """`{architecture}.{key}`, e.g. block_count, embedding_length."""
        return self.metadata.get(f"{self.architecture}.{key}")

    @property
    def vocab_size(self) -> int | None:
        """The token embedding's rows: the vocabulary the model's head spans (padding tokens included)."""
        shape = self.tensors.get("token_embd.weight")
        return shape[-1] if shape else None

    @property
    def has_output_tensor(self) -> bool:
        return "output.weight" in self.tensors


ARRAY_KEPT = 64  # longer arrays (the tokenizer's tokens and merges) are kept as {"length": n}


class Readable(Protocol):
    def read(self, count: int, /) -> bytes: ...


class _Reader:
    """Little-endian values from a stream, failing with GgufHeaderError on a short read."""

    def __init__(self, stream: Readable) -> None:
        self.stream = stream

    def take(self, count: int) -> bytes:
        data = self.stream.read(count)
        if len(data) != count:
            raise GgufHeaderError("the header ends early (truncated file or part)")
        return data

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self) -> int:
        value = int(self.scalar("<Q"))
        if value > MAX_HEADER_ITEMS:
            raise GgufHeaderError(f"a count of {value} is no model's: the header is corrupt")
        return value

    def string(self) -> str:
        length = int(self.scalar("<Q"))
        if length > MAX_STRING_BYTES:
            raise GgufHeaderError(f"a string of {length} bytes: the header is corrupt")
        return self.take(length).decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, length = int(self.scalar("<I")), self.count()
            items = [self.value(item_kind) for _ in range(length)]
            return items if length <= ARRAY_KEPT else {"length": length}
        raise GgufHeaderError(f"unknown GGUF value type {kind}: the header is corrupt")


def read_header(stream: Readable) -> GgufHeader:
    """The header at the start of `stream` (GgufHeaderError when it is not one)."""
    reader = _Reader(stream)
    if reader.take(4) != MAGIC:
        raise GgufHeaderError("not a GGUF file (no GGUF magic at its start)")
    version = int(reader.scalar("<I"))
    if version not in (2, 3):
        raise GgufHeaderError(f"GGUF version {version}; versions 2 and 3 are read")
    tensor_count, kv_count = reader.count(), reader.count()
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = reader.string()
        metadata[key] = reader.value(int(reader.scalar("<I")))
    tensors: dict[str, tuple[int, ...]] = {}
    for _ in range(tensor_count):
        name = reader.string()
        dims = int(reader.scalar("<I"))
        if dims > 8:
            raise GgufHeaderError(f"tensor {name} has {dims} dimensions: the header is corrupt")
        tensors[name] = tuple(int(reader.scalar("<Q")) for _ in range(dims))
        reader.scalar("<I")  # type
        reader.scalar("<Q")  # offset
    return GgufHeader(version, metadata, tensors)


class ChainedFiles:
    """Several files read as one stream, in order (a GGUF split into parts), opened lazily."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths, self.index = list(paths), 0
        self._handle: BinaryIO | None = None

    def read(self, count: int) -> bytes:
        chunks: list[bytes] = []
        while count > 0 and self.index < len(self.paths):
            if self._handle is None:
                self._handle = self.paths[self.index].open("rb")
            data = self._handle.read(count)
            if not data:
                self._handle.close()
                self._handle, self.index = None, self.index + 1
                continue
            chunks.append(data)
            count -= len(data)
        return b"".join(chunks)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def read_header_of(paths: Sequence[Path]) -> GgufHeader:
    """The header of a GGUF file, or of one split over `paths` in order."""
    chained = ChainedFiles(paths)
    try:
        return read_header(chained)
    finally:
        chained.close()
