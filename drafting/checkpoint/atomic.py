"""Building a folder beside its destination and swapping it in only when complete.

Names beside `dest`:
- `.<dest>.eyas-tmp-<pid>-<token>`: the work in progress of process <pid>;
- `.<dest>.eyas-old-<pid>`: the previous `dest`, kept aside (force) until the new one is in place.
A run killed at any point leaves the source and the old destination as they were; the next run removes
the leftovers of dead processes, and puts an old destination back if the swap was cut between its
two renames.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from drafting.checkpoint.errors import CheckpointError

_TMP = "eyas-tmp"
_OLD = "eyas-old"


def check_paths(source: Path, dest: Path, *, force: bool) -> None:
    """Refuse overlapping source/dest, a missing source, and an existing dest without force."""
    if not source.is_dir():
        raise CheckpointError(f"{source}: source is not a folder", path=source)
    src, dst = source.resolve(), dest.resolve()
    if src == dst or dst.is_relative_to(src) or src.is_relative_to(dst):
        raise CheckpointError(
            f"{dest}: destination overlaps the source {source}; pick another folder", path=dest
        )
    if not dest.parent.is_dir():
        raise CheckpointError(
            f"{dest.parent}: the destination's parent folder does not exist", path=dest.parent
        )
    if dest.exists() and not force:
        raise CheckpointError(f"{dest}: already exists; pass force to replace it", path=dest)
    if dest.exists() and not dest.is_dir():
        raise CheckpointError(f"{dest}: exists and is not a folder; refusing to replace it", path=dest)


@contextmanager
def workspace(dest: Path) -> Iterator[Path]:
    """A fresh folder beside dest (same filesystem, so the final rename is atomic), removed on exit."""
    work = dest.parent / f".{dest.name}.{_TMP}-{os.getpid()}-{secrets.token_hex(4)}"
    work.mkdir()
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def move_into_place(built: Path, dest: Path) -> None:
    """Rename `built` to `dest`; an existing dest is set aside first and removed only afterwards."""
    old = None
    if dest.exists():
        old = dest.parent / f".{dest.name}.{_OLD}-{os.getpid()}"
        os.rename(dest, old)
    try:
        os.rename(built, dest)
    except OSError:
        if old is not None:
            os.rename(old, dest)
        raise
    fsync_dir(dest.parent)
    if old is not None:
        shutil.rmtree(old)


def clean_stale(dest: Path) -> None:
    """Remove what dead runs left beside dest; restore a set-aside destination if dest is gone."""
    if not dest.parent.is_dir():
        return
    pattern = re.compile(rf"^\.{re.escape(dest.name)}\.({_TMP}|{_OLD})-(\d+)(?:-[0-9a-f]+)?$")
    for entry in sorted(dest.parent.iterdir()):
        match = pattern.match(entry.name)
        if not match or psutil.pid_exists(int(match.group(2))):
            continue
        if match.group(1) == _OLD and not dest.exists():
            os.rename(entry, dest)
        else:
            shutil.rmtree(entry, ignore_errors=True)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
