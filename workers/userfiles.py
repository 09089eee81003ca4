"""Reading files at user-given paths: regular files only, a size cap per kind of file, an error naming the path.

A path in a job's params or on the command line may name anything: `/dev/zero` (reads forever and grows
memory without bound), a FIFO (blocks until a writer comes, i.e. until the job's timeout), a socket, a
folder, a 50 GB file where a 2 KB config belongs. Every read of a user path goes through here, so each of
those becomes an immediate `UserFileError` naming the path and what was wrong. The file is opened with
O_NONBLOCK (a FIFO can then not block the open itself) and checked with fstat on the opened descriptor, so
a path swapped between the check and the read is judged by what was actually opened.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import IO, Any

_MiB = 1024 * 1024


class Cap(IntEnum):
    """The most bytes eyas reads from one file of each kind (generous for real use, finite for hostile)."""

    CONFIG = 16 * _MiB  # config.json, generation_config.json, tokenizer_config.json, index files
    TOKENIZER = 256 * _MiB  # tokenizer.json of large-vocabulary models is tens of MB
    SPEC = 4 * _MiB  # launch specs, pipeline specs, params files
    DATASET = 64 * 1024 * _MiB  # conversation / prompt JSONL, streamed line by line
    LINE = 16 * _MiB  # one JSONL record
    HEADER = 100 * _MiB  # a safetensors header (safetensors' own limit)


class UserFileError(ValueError):
    """A user-given path that eyas will not read, with the reason; `path` names it."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: Path | str, cap: int, what: str = "file") -> int:
    """The size of a regular file no larger than `cap`, else UserFileError (never opens, never blocks)."""
    try:
        info = os.stat(path)
    except FileNotFoundError as exc:
        raise UserFileError(path, f"{what} not found") from exc
    except OSError as exc:
        raise UserFileError(path, f"cannot read {what}: {exc.strerror or exc}") from exc
    return _judge(path, info, cap, what)


def _judge(path: Path | str, info: os.stat_result, cap: int, what: str) -> int:
    if not stat.S_ISREG(info.st_mode):
        raise UserFileError(path, f"{what} is {_kind(info.st_mode)}, not a regular file")
    if info.st_size > cap:
        raise UserFileError(path, f"{what} is {info.st_size:,} bytes; eyas reads at most {cap:,} for this kind")
    return info.st_size


@contextmanager
def open_user_file(path: Path | str, cap: int, what: str = "file") -> Iterator[IO[bytes]]:
    """A binary handle on a regular file of at most `cap` bytes (judged on the opened descriptor)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise UserFileError(path, f"{what} not found") from exc
    except IsADirectoryError as exc:
        raise UserFileError(path, f"{what} is a folder, not a regular file") from exc
    except OSError as exc:
        raise UserFileError(path, f"cannot read {what}: {exc.strerror or exc}") from exc
    try:
        _judge(path, os.fstat(fd), cap, what)
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_user_bytes(path: Path | str, cap: int, what: str = "file") -> bytes:
    with open_user_file(path, cap, what) as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:  # grew after the check
        raise UserFileError(path, f"{what} grew past {cap:,} bytes while being read")
    return data


def read_user_text(path: Path | str, cap: int, what: str = "file") -> str:
    try:
        return read_user_bytes(path, cap, what).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserFileError(path, f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def read_user_json(path: Path | str, cap: int = Cap.CONFIG, what: str = "file") -> Any:
    """Parsed JSON of any type; a JSON error names the path, line and column."""
    text = read_user_text(path, cap, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserFileError(path, f"{what} is not valid JSON ({exc})") from exc


def iter_user_lines(
    path: Path | str, cap: int = Cap.DATASET, what: str = "file", line_cap: int = Cap.LINE
) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file, streamed; a line over `line_cap` bytes is an error."""
    with open_user_file(path, cap, what) as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(line_cap + 1), b""), start=1):
            if len(raw) > line_cap and not raw.endswith(b"\n"):
                raise UserFileError(path, f"{what} line {number} is longer than {line_cap:,} bytes")
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise UserFileError(path, f"{what} line {number} is not UTF-8 ({exc.reason})") from exc


def check_model_folder(folder: Path | str, what: str = "model folder") -> None:
    """Every file transformers would read from a model folder is a regular file within its cap.

    transformers' own loaders open config.json, tokenizer files and weight indexes with plain `open`, so a
    FIFO or /dev/zero among them hangs or exhausts memory inside the library; checking first turns that
    into an error naming the file. Weight files are only required to be regular (they are memory-mapped).
    """
    root = Path(folder)
    if not root.is_dir():
        check_regular(root, Cap.CONFIG, what)  # raises the precise reason (a FIFO, a device, missing)
        raise UserFileError(root, f"{what} is a file, not a folder")
    for entry in root.iterdir():
        name = entry.name
        if name.endswith((".safetensors", ".bin", ".pt", ".pth", ".gguf")):
            check_regular(entry, 1 << 62, "weight file")
        elif name.endswith(".json") or name.endswith((".model", ".txt", ".jinja")):
            cap = Cap.TOKENIZER if name.startswith(("tokenizer", "vocab", "merges")) else Cap.CONFIG
            check_regular(entry, cap, name)
