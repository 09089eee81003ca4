"""Reading files at user-given paths: regular files only, a size cap per kind of file, errors naming the path.

A path in a job's params or on the command line may name anything: `/dev/zero` (reads forever and grows
memory without bound), a FIFO (blocks until a writer comes, i.e. until the job's timeout), a socket, a
folder, a 50 GB file where a 2 KB config belongs. Every read of a user path goes through here, so each of
those becomes an immediate `UserFileError` naming the path and what was wrong.

The path is judged with stat before it is opened (opening some devices acts: a watchdog, a tape), then
opened with O_NONBLOCK (a FIFO swapped in can then not block the open itself) and judged again with fstat
on the opened descriptor, so a path swapped between the check and the read is judged by what was opened.
Reads never ask for more than the file's size (+1) at once, and stop at the cap even if the file grows.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import IO, Any, Literal

_MiB = 1024 * 1024
_NO_CAP = 1 << 62

Problem = Literal["missing", "not_regular", "too_large", "unreadable", "invalid"]


class Cap(IntEnum):
    """The most bytes eyas reads from one file of each kind (generous for real use, finite for hostile)."""

    CONFIG = 16 * _MiB  # config.json, generation_config.json, tokenizer_config.json, index files, manifests
    TOKENIZER = 256 * _MiB  # tokenizer.json of large-vocabulary models is tens of MB
    SPEC = 4 * _MiB  # launch specs, pipeline specs, params files
    DATASET = 64 * 1024 * _MiB  # conversation / prompt JSONL, streamed line by line
    LINE = 16 * _MiB  # one JSONL record
    HEADER = 100 * _MiB  # a safetensors header (safetensors' own limit)
    WEIGHTS = _NO_CAP  # weights and saved states: memory-mapped or loaded whole; only required to be regular


class UserFileError(ValueError):
    """A user-given path that eyas will not read, with the reason; `path` names it.

    `problem` sorts the reasons: missing, not_regular (a folder, FIFO, device, socket), too_large,
    unreadable (permissions, I/O), invalid (not UTF-8, not JSON, an over-long line)."""

    def __init__(self, path: Path | str, reason: str, problem: Problem = "invalid") -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason
        self.problem: Problem = problem


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


def _stat_error(path: Path | str, exc: OSError, what: str) -> UserFileError:
    if isinstance(exc, FileNotFoundError):
        return UserFileError(path, f"{what} not found", "missing")
    if isinstance(exc, IsADirectoryError):
        return UserFileError(path, f"{what} is a folder, not a regular file", "not_regular")
    return UserFileError(path, f"cannot read {what}: {exc.strerror or exc}", "unreadable")


def _open_error(path: Path | str, exc: OSError, what: str) -> UserFileError:
    if exc.errno == errno.ELOOP:
        return UserFileError(path, f"{what} is a symlink; eyas uses only the file itself here", "not_regular")
    return _stat_error(path, exc, what)


def check_regular(path: Path | str, cap: int, what: str = "file") -> int:
    """The size of a regular file no larger than `cap`, else UserFileError (never opens, never blocks).

    Symlinks are followed: a link to /dev/zero is a character device."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _stat_error(path, exc, what) from exc
    return _judge(path, info, cap, what)


def _judge(path: Path | str, info: os.stat_result, cap: int, what: str) -> int:
    if not stat.S_ISREG(info.st_mode):
        raise UserFileError(path, f"{what} is {_kind(info.st_mode)}, not a regular file", "not_regular")
    if info.st_size > cap:
        raise UserFileError(
            path, f"{what} is {info.st_size:,} bytes; eyas reads at most {cap:,} for this kind", "too_large"
        )
    return info.st_size


@contextmanager
def open_user_file(
    path: Path | str, cap: int, what: str = "file", *, follow: bool = True
) -> Iterator[IO[bytes]]:
    """A binary handle on a regular file of at most `cap` bytes (judged before and after opening).
    `follow` False refuses a symlink at the file's own name (a file eyas wrote and reads back)."""
    check_regular(path, cap, what)
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | nofollow | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _open_error(path, exc, what) from exc
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
    """The whole file, at most `cap` bytes (a file that grows past it while being read is an error)."""
    with open_user_file(path, cap, what) as handle:
        size = os.fstat(handle.fileno()).st_size
        chunks = [handle.read(min(size, cap) + 1)]  # never allocate the cap for a small file
        total = len(chunks[0])
        while total <= cap and chunks[-1]:  # the file grew, or reports size 0 (/proc): read on to the cap
            chunks.append(handle.read(min(cap + 1 - total, _MiB)))
            total += len(chunks[-1])
    if total > cap:
        raise UserFileError(path, f"{what} grew past {cap:,} bytes while being read", "too_large")
    return b"".join(chunks)


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


def read_user_json_object(path: Path | str, cap: int = Cap.CONFIG, what: str = "file") -> dict[str, Any]:
    """Like read_user_json, but anything other than a JSON object is an error too."""
    loaded = read_user_json(path, cap, what)
    if not isinstance(loaded, dict):
        raise UserFileError(path, f"{what} must hold a JSON object, not {type(loaded).__name__}")
    return loaded


def iter_user_lines(
    path: Path | str, cap: int = Cap.DATASET, what: str = "file", line_cap: int = Cap.LINE
) -> Iterator[tuple[int, str]]:
    """(line number, text without its line end) of a UTF-8 text file, streamed; a line over `line_cap`
    bytes, or more than `cap` bytes in all, is an error."""
    total = 0
    with open_user_file(path, cap, what) as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(line_cap + 1), b""), start=1):
            if len(raw) > line_cap and not raw.endswith(b"\n"):
                raise UserFileError(path, f"{what} line {number} is longer than {line_cap:,} bytes")
            total += len(raw)
            if total > cap:
                raise UserFileError(path, f"{what} grew past {cap:,} bytes while being read", "too_large")
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise UserFileError(path, f"{what} line {number} is not UTF-8 ({exc.reason})") from exc


def append_user_text(path: Path | str, text: str, what: str = "file") -> None:
    """Append to a regular file (created if missing): a FIFO or device there is an error, never a hang,
    and a symlink at its name is never written through."""
    if os.path.lexists(path):
        check_regular(path, _NO_CAP, what)  # a link to a device is named as the device it leads to
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)  # a FIFO without a reader: ENXIO, not a wait
    except OSError as exc:
        raise _open_error(path, exc, what) from exc
    try:
        _judge(path, os.fstat(fd), _NO_CAP, what)
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


# Files that transformers, tokenizers and datasets read from a folder, by name: a cap for each.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".arrow", ".msgpack", ".h5", ".npz")
_TEXT_SUFFIXES = (".json", ".model", ".txt", ".jinja", ".tiktoken", ".py", ".vocab")
_TOKENIZER_PREFIXES = ("tokenizer", "vocab", "merges", "spiece", "sentencepiece")
_READ_SUBFOLDERS = ("additional_chat_templates",)


def _folder_entry_cap(name: str) -> int | None:
    if name.endswith(_WEIGHT_SUFFIXES):
        return _NO_CAP
    if name.endswith(_TEXT_SUFFIXES):
        return Cap.TOKENIZER if name.startswith(_TOKENIZER_PREFIXES) or "vocab" in name else Cap.CONFIG
    return None


def check_model_folder(folder: Path | str, what: str = "model folder") -> None:
    """Every file a library would read from a model (or dataset) folder is a regular file within its cap.

    transformers' own loaders open config.json, tokenizer files and weight indexes with plain `open`, so a
    FIFO or /dev/zero among them hangs or exhausts memory inside the library; checking first turns that
    into an error naming the file. Weight files are only required to be regular (they are memory-mapped).
    Files of other names are not read by those libraries, but a FIFO, device or socket among them is
    refused all the same: nothing in a model folder has a reason to be one.
    """
    root = Path(folder)
    try:
        info = os.stat(root)
    except OSError as exc:
        raise _stat_error(root, exc, what) from exc
    if not stat.S_ISDIR(info.st_mode):
        kind = "a file" if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)
        raise UserFileError(root, f"{what} is {kind}, not a folder", "not_regular")
    entries = list(root.iterdir())
    for sub in _READ_SUBFOLDERS:
        if (root / sub).is_dir():
            entries += list((root / sub).iterdir())
    for entry in entries:
        cap = _folder_entry_cap(entry.name)
        if cap is not None:
            check_regular(entry, cap, entry.name)
            continue
        try:
            mode = os.stat(entry).st_mode
        except OSError:
            continue  # a dangling link of a name nothing reads
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UserFileError(entry, f"{entry.name} is {_kind(mode)}, not a regular file", "not_regular")
