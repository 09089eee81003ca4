"""The conversations file: append-only, one JSON line per finished record, and what a resumed job finds in it.

A record is written with one write() of a whole line, so a killed job leaves whole lines and at most one
half-written last line; resuming discards that tail (the file is cut back to its last newline) and keeps
every whole line byte for byte. Lines are fsync'd in batches (every SYNC_EVERY records or SYNC_INTERVAL_S),
and on close: a crash of the machine loses at most the last batch, which the next run regenerates.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.params.text import scrub
from drafting.userfiles import Cap, UserFileError, check_regular, open_user_file

SYNC_EVERY = 32
SYNC_INTERVAL_S = 2.0
SELF_KEY_PREFIX = "self-"


class OutputMismatch(ValueError):
    """The output file holds a line eyas did not write (it will not append to someone else's file)."""


@dataclass
class Existing:
    """What a previous run left in the output."""

    keys: set[str] = field(default_factory=set)
    self_prompts: list[str] = field(default_factory=list)  # user turns the target wrote, for deduplication
    next_self_index: int = 0
    discarded_bytes: int = 0  # a half-written last line, cut off

    @property
    def records(self) -> int:
        return len(self.keys)


def prepare_output(path: Path, *, resume: bool) -> Existing:
    """Resume: read what is there and cut a half-written tail. Otherwise: start an empty file, but only
    over a file generate started (its first record is one generate wrote): anything else is left as it is
    (OutputMismatch). A symlink at the output's name is never followed (UserFileError). In a stage
    process `path` is <pinned parent>/<name>."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(path):
        return Existing()
    check_regular(path, Cap.WEIGHTS, "output")  # a FIFO or a device there is an error, never a hang
    if not resume:
        _check_started_by_generate(path)
        with _open_append(path) as handle:  # no symlink is followed: the file checked, or a failure
            os.ftruncate(handle.fd, 0)
        return Existing()
    existing, whole_bytes = _read_existing(path)
    with _open_append(path) as handle:
        size = os.fstat(handle.fd).st_size
        if size > whole_bytes:
            os.ftruncate(handle.fd, whole_bytes)
            existing.discarded_bytes = size - whole_bytes
    return existing


def _check_started_by_generate(path: Path) -> None:
    """A file whose first record generate did not write is someone else's: eyas does not empty it."""
    with open_user_file(path, Cap.DATASET, "output", follow=False) as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(Cap.LINE + 1), b""), start=1):
            if raw.strip():
                _parse_written(raw, number, path, resume=False)
                return


def _read_existing(path: Path) -> tuple[Existing, int]:
    existing = Existing()
    whole_bytes = 0
    with open_user_file(path, Cap.DATASET, "output", follow=False) as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(Cap.LINE + 1), b""), start=1):
            if not raw.endswith(b"\n"):
                if handle.read(1):  # more follows: a line over the cap, not a tail (never cut whole lines)
                    raise OutputMismatch(f"{path} line {number} is longer than {Cap.LINE:,} bytes")
                break  # the half-written tail of a killed run
            whole_bytes += len(raw)
            if not raw.strip():
                continue
            key, self_prompt = _parse_written(raw, number, path, resume=True)
            existing.keys.add(key)
            if self_prompt is not None:
                existing.self_prompts.append(self_prompt)
                existing.next_self_index = max(existing.next_self_index, _self_index(key) + 1)
    return existing, whole_bytes


def _parse_written(raw: bytes, number: int, path: Path, *, resume: bool) -> tuple[str, str | None]:
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    messages = record.get("messages") if isinstance(record, dict) else None
    key = record.get("id") if isinstance(record, dict) else None
    if not isinstance(key, str) or not isinstance(messages, list):
        if not resume:
            raise OutputMismatch(
                f"{path} line {number} is not a record generate wrote (no `id` and `messages`): eyas starts "
                "afresh only an output generate started; move the file away or choose another output"
            )
        raise OutputMismatch(
            f"{path} line {number} is not a record generate wrote (no `id` and `messages`): resuming would "
            "mix files; move it away, or choose another output"
        )
    generation = record.get("generation") if isinstance(record, dict) else None
    if isinstance(generation, dict) and generation.get("source") == "self_prompts":
        first_user = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
        content = first_user.get("content") if first_user else None
        return key, content if isinstance(content, str) else None
    return key, None


def _self_index(key: str) -> int:
    number = key.removeprefix(SELF_KEY_PREFIX)
    return int(number) if key.startswith(SELF_KEY_PREFIX) and number.isdigit() else -1


def self_key(index: int) -> str:
    return f"{SELF_KEY_PREFIX}{index:08d}"


class _Handle:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)


def _open_append(path: Path) -> _Handle:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserFileError(
                path, "the output is a symlink; eyas writes only the file itself", "not_regular"
            ) from exc
        raise UserFileError(path, f"cannot open the output: {exc.strerror}", "unreadable") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO or device since it was checked
        os.close(fd)
        raise UserFileError(path, "the output is not a regular file", "not_regular")
    return _Handle(fd)


class DurableWriter:
    """Appends records as JSON lines; fsyncs in batches and on close."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = _open_append(path)
        self._unsynced = 0
        self._synced_at = time.monotonic()
        self.written = 0

    def write(self, record: dict[str, Any]) -> None:
        # ensure_ascii=False keeps the text readable; scrub guards the encode against a lone surrogate
        line = (json.dumps(scrub(record), ensure_ascii=False) + "\n").encode("utf-8")
        view = memoryview(line)
        while view:
            view = view[os.write(self._handle.fd, view) :]
        self.written += 1
        self._unsynced += 1
        if self._unsynced >= SYNC_EVERY or time.monotonic() - self._synced_at >= SYNC_INTERVAL_S:
            self.sync()

    def sync(self) -> None:
        if self._unsynced:
            os.fsync(self._handle.fd)
        self._unsynced = 0
        self._synced_at = time.monotonic()

    def close(self) -> None:
        try:
            self.sync()
        finally:
            self._handle.__exit__()
