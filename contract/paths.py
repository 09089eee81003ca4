"""Where a job may not write: rules on absolute paths that the API (at submit) and the worker (at the moment
of use, on the resolved path) both apply.

An output folder or file is refused when it is, contains or lies inside a place eyas must never replace or
write into: its data directory (database, broker, logs, tokens), the install (eyas's own packages, the
Python environment it runs in), or an allowed root itself (replacing a root would take every user's folders
with it). The API adds the paths other active jobs declared (app/jobs/path_rules.py).
"""

from __future__ import annotations

import functools
import posixpath
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

Overlap = Literal["is", "lies inside", "contains"]

# eyas's own top-level packages: an output may sit beside them in a checkout, never in or over them.
PACKAGES = ("app", "cli", "contract", "drafting", "workers", "migrations")


def normal(path: str | Path) -> str:
    """An absolute path without '.', '..' or a trailing slash (lexically: symlinks are the worker's part)."""
    return posixpath.normpath(str(path))


def overlap(path: str | Path, other: str | Path) -> Overlap | None:
    """How `path` meets `other`: the same place, inside it, containing it, or not at all."""
    a, b = normal(path), normal(other)
    if a == b:
        return "is"
    if a.startswith(b.rstrip("/") + "/"):
        return "lies inside"
    if b.startswith(a.rstrip("/") + "/"):
        return "contains"
    return None


@functools.cache
def install_paths() -> tuple[str, ...]:
    """eyas's own package folders and the Python environment running it (the venv and its base)."""
    source = Path(__file__).resolve().parents[1]
    found = [source / name for name in PACKAGES if (source / name).is_dir()]
    prefixes = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    found += [Path(p) for p in prefixes if p and normal(p) != "/"]
    return tuple(sorted({normal(p) for p in found} | {normal(Path(p).resolve()) for p in found}))


def output_problem(
    path: str | Path,
    *,
    data_dirs: Iterable[str | Path] = (),
    roots: Iterable[str | Path] = (),
    install: Iterable[str | Path] | None = None,
) -> str | None:
    """Why eyas will not write an output at `path` (None when it may): the rule it breaks, named."""
    for data_dir in data_dirs:
        if (how := overlap(path, data_dir)) is not None:
            return f"{path} {how} eyas's data directory {data_dir} (database, logs, tokens)"
    for root in roots:
        if overlap(path, root) == "is" or overlap(path, root) == "contains":
            return f"{path} is or contains the allowed root {root}: an output goes in a folder under it"
    for place in install_paths() if install is None else install:
        if (how := overlap(path, place)) is not None:
            return f"{path} {how} eyas's install ({place})"
    return None
