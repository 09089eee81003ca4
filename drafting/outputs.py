"""Output folders eyas makes: marked as its own, made whole under a temporary name, replaced only if its own.

Every output folder eyas makes holds MARKER (`.eyas-output.json`: made_by eyas, the stage kind and job id).
A folder without it is someone else's: eyas writes into it only when it is empty, and never replaces it,
`force` or not. A new folder is made under a temporary name beside its destination, marked first, and
renamed into place without replacing anything (renameat2 RENAME_NOREPLACE), so the destination's name never
shows a folder that is not eyas's. Every step works relative to the held descriptor of the parent folder and
never follows a symlink at the output's own name (drafting/safepaths.py pins that parent).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from typing import Any

from drafting.safepaths import DIRECTORY

MARKER = ".eyas-output.json"
TMP_TAG = "eyas-tmp"
_MARKER_CAP = 64 * 1024
_RENAME_NOREPLACE = 1
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "ppc64le": 357, "s390x": 347}
_libc = ctypes.CDLL(None, use_errno=True)


class NotOurs(Exception):
    """An output eyas will not write into or replace: not made by eyas, a symlink, or not a folder."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


@dataclass(frozen=True)
class OutputMark:
    """What the marker of an output folder says: which stage of which job made it."""

    kind: str
    job_id: str | None = None

    def payload(self) -> bytes:
        # No clock in it: the same conversion by the same job writes the same bytes (checkpoint digests).
        record = {"made_by": "eyas", "kind": self.kind, "job_id": self.job_id}
        return (json.dumps(record, indent=2) + "\n").encode()


def write_mark(folder_fd: int, mark: OutputMark) -> None:
    """Put the marker in the folder `folder_fd` (a new file: never through a link, never over a file)."""
    fd = os.open(
        MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder_fd
    )
    try:
        data = memoryview(mark.payload())
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def read_mark(folder_fd: int) -> dict[str, Any] | None:
    """The marker of the folder `folder_fd`, or None when it has none eyas wrote."""
    try:
        fd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MARKER_CAP:
            return None
        record = json.loads(os.read(fd, _MARKER_CAP + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return record if isinstance(record, dict) and record.get("made_by") == "eyas" else None


def open_folder(parent_fd: int, name: str) -> int | None:
    """The folder `name` in `parent_fd` (None if there is nothing there); a symlink or a file is refused."""
    try:
        return os.open(name, DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symlink" if _is_link(parent_fd, name) else "not a folder"
            raise NotOurs(
                name, f"{name} is {kind}; eyas writes an output folder only by its own name"
            ) from None
        raise


def claim_folder(parent_fd: int, name: str, mark: OutputMark, *, shown: str) -> int:
    """A descriptor of the output folder `name` in `parent_fd` that eyas may write into: its own (marked)
    folder, an empty folder it marks now, or a new marked folder. Anything else raises NotOurs."""
    for _ in range(3):  # a rank racing this one may make it between the look and the rename
        fd = open_folder(parent_fd, name)
        if fd is None:
            made = _made_new(parent_fd, name, mark)
            if made is not None:
                return made
            continue
        if read_mark(fd) is not None:
            return fd
        if not os.listdir(fd):
            with contextlib.suppress(FileExistsError):  # a rank marked it first
                write_mark(fd, mark)
            return fd
        os.close(fd)
        raise NotOurs(
            name,
            f"{shown} already holds files eyas did not write (it has no {MARKER}); choose a new output "
            "folder or an empty one",
        )
    raise NotOurs(name, f"{shown} kept changing while eyas made it")


def _made_new(parent_fd: int, name: str, mark: OutputMark) -> int | None:
    """A new marked folder renamed to `name`; None when something took the name first."""
    work, fd = make_workspace(parent_fd, name, mark)
    try:
        rename_noreplace(parent_fd, work, parent_fd, name)
    except FileExistsError:
        os.close(fd)
        shutil.rmtree(work, dir_fd=parent_fd, ignore_errors=True)
        return None
    fsync_folder(parent_fd)
    return fd


def make_workspace(parent_fd: int, name: str, mark: OutputMark) -> tuple[str, int]:
    """(name, descriptor) of a new marked folder `.<name>.eyas-tmp-<pid>-<hex>` beside `name`."""
    work = f".{name}.{TMP_TAG}-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(work, 0o755, dir_fd=parent_fd)
    fd = os.open(work, DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    write_mark(fd, mark)
    return work, fd


def rename_noreplace(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """Rename without replacing whatever is at `dst` (FileExistsError then). Without renameat2 (old kernels,
    other architectures): an empty placeholder is made at `dst` first, which rename may replace."""
    number = _SYS_RENAMEAT2.get(os.uname().machine)
    if number is not None:
        done = _libc.syscall(number, src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), _RENAME_NOREPLACE)
        if done == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
            raise OSError(code, os.strerror(code), dst)
    os.mkdir(dst, 0o700, dir_fd=dst_fd)  # FileExistsError if anything is there
    os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def fsync_folder(fd: int) -> None:
    held = os.open(".", DIRECTORY, dir_fd=fd)
    try:
        os.fsync(held)
    finally:
        os.close(held)


def _is_link(parent_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=parent_fd).st_mode)
    except OSError:
        return False
