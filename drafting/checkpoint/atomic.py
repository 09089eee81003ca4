"""Building a folder beside its destination and swapping it in only when complete.

The destination's parent folder is opened once and held (in a stage process it is already pinned beneath
its allowed root: drafting/safepaths.py); every step below is relative to that descriptor, and the
destination's own name is never followed. Names beside `dest`:
- `.<dest>.eyas-tmp-<pid>-<token>`: the work in progress of process <pid> (marked as eyas's from the start);
- `.<dest>.eyas-old-<pid>`: the previous `dest`, kept aside (force) until the new one is in place.
`force` replaces only a folder eyas made (drafting/outputs.py MARKER): a user's folder is never replaced.
A run killed at any point leaves the source and the old destination as they were; the next run removes
the marked leftovers of dead processes, and puts an old destination back if the swap was cut between its
two renames.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from drafting.checkpoint.errors import CheckpointError, DestinationNotOurs
from drafting.outputs import (
    MARKER,
    TMP_TAG,
    NotOurs,
    OutputMark,
    fsync_folder,
    make_workspace,
    open_folder,
    read_mark,
    rename_noreplace,
    write_mark,
)
from drafting.safepaths import DIRECTORY

_OLD = "eyas-old"


class Destination:
    """`dest`, handled by name relative to its held parent folder."""

    def __init__(self, dest: Path, mark: OutputMark) -> None:
        self.path, self.name, self.output_mark = Path(dest), Path(dest).name, mark
        try:
            self.parent_fd = os.open(self.path.parent, DIRECTORY)
        except OSError:
            raise CheckpointError(
                f"{self.path.parent}: the destination's parent folder does not exist", path=self.path.parent
            ) from None

    def __enter__(self) -> Destination:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.parent_fd)

    def check(self, source: Path, *, force: bool) -> None:
        """Refuse overlapping source/dest, a missing source, an existing dest without force, and with force
        a dest eyas did not make."""
        if not source.is_dir():
            raise CheckpointError(f"{source}: source is not a folder", path=source)
        src, dst = source.resolve(), self.path.resolve()
        if src == dst or dst.is_relative_to(src) or src.is_relative_to(dst):
            raise CheckpointError(
                f"{self.path}: destination overlaps the source {source}; pick another folder", path=self.path
            )
        try:
            existing = open_folder(self.parent_fd, self.name)
        except NotOurs:
            raise DestinationNotOurs(
                f"{self.path}: exists and is not a folder; refusing to replace it", path=self.path
            ) from None
        if existing is None:
            return
        try:
            ours = read_mark(existing) is not None
        finally:
            os.close(existing)
        if not force:
            raise CheckpointError(f"{self.path}: already exists; pass force to replace it", path=self.path)
        if not ours:
            raise DestinationNotOurs(
                f"{self.path}: already exists and eyas did not make it (it has no {MARKER}); force replaces "
                "only a folder eyas wrote: move it away or choose another dest",
                path=self.path,
            )

    @contextmanager
    def workspace(self) -> Iterator[Path]:
        """A fresh marked folder beside dest (same filesystem, so the final rename is atomic), removed on
        exit; yielded as the path of its held descriptor."""
        name, fd = make_workspace(self.parent_fd, self.name, self.output_mark)
        try:
            yield Path(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
            shutil.rmtree(name, dir_fd=self.parent_fd, ignore_errors=True)

    def mark(self, folder: Path) -> None:
        """Mark a folder built in the workspace as eyas's, before it takes dest's name."""
        fd = os.open(folder, DIRECTORY | os.O_NOFOLLOW)
        try:
            write_mark(fd, self.output_mark)
        finally:
            os.close(fd)

    def move_into_place(self, built: Path) -> None:
        """Rename `built` to dest; an existing dest (eyas's, checked again now) is set aside first and
        removed only afterwards."""
        old = self._set_aside()
        try:
            rename_noreplace(self.parent_fd, str(built), self.parent_fd, self.name)
        except OSError:
            if old is not None:
                rename_noreplace(self.parent_fd, old, self.parent_fd, self.name)
            raise
        fsync_folder(self.parent_fd)
        if old is not None:
            shutil.rmtree(old, dir_fd=self.parent_fd)

    def _set_aside(self) -> str | None:
        existing = open_folder(self.parent_fd, self.name)
        if existing is None:
            return None
        try:
            held = os.fstat(existing)
            if read_mark(existing) is None:
                raise DestinationNotOurs(
                    f"{self.path}: eyas did not make it; not replacing it", path=self.path
                )
        finally:
            os.close(existing)
        old = f".{self.name}.{_OLD}-{os.getpid()}"
        os.rename(self.name, old, src_dir_fd=self.parent_fd, dst_dir_fd=self.parent_fd)
        moved = os.lstat(old, dir_fd=self.parent_fd)
        if (moved.st_dev, moved.st_ino) != (held.st_dev, held.st_ino):  # swapped after the check
            os.rename(old, self.name, src_dir_fd=self.parent_fd, dst_dir_fd=self.parent_fd)
            raise CheckpointError(f"{self.path}: changed while it was being replaced", path=self.path)
        return old

    def clean_stale(self) -> None:
        """Remove what dead runs left beside dest (only folders eyas marked); restore a set-aside
        destination if dest is gone."""
        pattern = re.compile(rf"^\.{re.escape(self.name)}\.({TMP_TAG}|{_OLD})-(\d+)(?:-[0-9a-f]+)?$")
        for entry in sorted(os.listdir(self.parent_fd)):
            match = pattern.match(entry)
            if not match or psutil.pid_exists(int(match.group(2))):
                continue
            if match.group(1) == _OLD and not _present(self.parent_fd, self.name):
                rename_noreplace(self.parent_fd, entry, self.parent_fd, self.name)
                continue
            left = open_or_none(self.parent_fd, entry)
            if left is None:
                continue
            try:
                ours = read_mark(left) is not None or _cut_while_marking(left)
            finally:
                os.close(left)
            if ours:
                shutil.rmtree(entry, dir_fd=self.parent_fd, ignore_errors=True)


def _cut_while_marking(folder_fd: int) -> bool:
    """A folder of eyas's name that holds nothing but, at most, a marker cut short: its process died between
    making the folder and finishing the marker, before anything else was written in it."""
    return set(os.listdir(folder_fd)) <= {MARKER}


def _present(parent_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=parent_fd)
    except FileNotFoundError:
        return False
    return True


def open_or_none(parent_fd: int, name: str) -> int | None:
    """The folder `name` in `parent_fd`, or None for nothing there, a symlink or a file."""
    try:
        return open_folder(parent_fd, name)
    except NotOurs:
        return None


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
