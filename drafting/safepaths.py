"""User paths resolved beneath their allowed root at the moment of use, and held open from then on.

A path checked by name and opened later by name can be turned elsewhere in between: a symlink under an
allowed root flipped to a folder outside it sends the write outside every root. So a stage process never
uses a user path by its name after checking it. It resolves the path once, relative to a held descriptor
of the allowed root, with no step of the resolution allowed to leave that root, and keeps the resulting
descriptor open for the rest of the job:

- with openat2(2) (Linux 5.6+) and RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: the kernel refuses any `..`
  or symlink that would climb out of the root, atomically (a concurrent rename makes it retry, never
  escape). Relative symlinks that stay inside are followed (a Hugging Face cache snapshot is a folder of
  relative links into its blobs); the kernel refuses every absolute one, so those go to the walk below;
- elsewhere (and for absolute symlinks), component by component, each opened with O_NOFOLLOW relative to
  the folder before it and held: a symlink met is read and its target walked the same way, from the root
  again when it is an absolute path under the root; one that leads anywhere else is refused.

Libraries (transformers, safetensors, torch, tokenizers, SGLang in its own process) take path strings, so
the stage hands them a *view*: a symlink in a private temporary folder to `/proc/<pid>/fd/<n>`, the descriptor
the resolution produced. Opening through it reaches that very folder or file whatever happens to the user's
path afterwards (the descriptor pins the inode, not the name); the view keeps the user's last name, so a
library that looks at a file's suffix sees the same one. `describe` turns views back into the user's paths
in everything the job reports.

An output is never followed at all: its parent folder is pinned (missing folders are made beneath the root,
each relative to the one before), and the output itself is made, opened or replaced by name relative to that
held parent with O_NOFOLLOW (drafting/outputs.py). contract/paths.py says where outputs may not go; the
parent's real location, read back from its descriptor, is what those rules judge.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import posixpath
import shutil
import stat
import tempfile
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contract.paths import normal, output_problem
from contract.reasons import TerminationReason

_AT_FDCWD = -100
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (the unified syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_EAGAIN_RETRIES = 64
_STEP_ATTEMPTS = 8  # a name swapped between a link and a folder while it is looked at is looked at again
_MAX_LINKS = 40  # the kernel's own limit on symlinks in one lookup
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
VIEWS_PREFIX = "eyas-views-"


class PathRefused(Exception):
    """A user path eyas will not use, with the termination reason a job fails with."""

    def __init__(self, path: str | Path, message: str, reason: TerminationReason) -> None:
        super().__init__(message)
        self.path = str(path)
        self.message = message
        self.reason = reason


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_kernel_resolves: bool | None = None


def _openat2(dir_fd: int, relative: str, flags: int, mode: int, resolve: int) -> int:
    tmpfile = getattr(os, "O_TMPFILE", 0)  # holds O_DIRECTORY's bit: only all of it means a temporary file
    creates = flags & os.O_CREAT or (tmpfile and flags & tmpfile == tmpfile)
    how = _OpenHow(flags | os.O_CLOEXEC, mode if creates else 0, resolve)
    for _ in range(_EAGAIN_RETRIES):
        fd = int(
            _libc.syscall(_SYS_OPENAT2, dir_fd, os.fsencode(relative), ctypes.byref(how), ctypes.sizeof(how))
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EAGAIN:  # EAGAIN: a rename raced the lookup; the kernel asks for a retry
            raise OSError(code, os.strerror(code), relative)
    raise OSError(errno.EAGAIN, "the path kept changing while it was resolved", relative)


def kernel_resolves_beneath() -> bool:
    """Whether openat2 works here (Linux 5.6+, not filtered by a seccomp profile)."""
    global _kernel_resolves
    if _kernel_resolves is None:
        try:
            os.close(_openat2(_AT_FDCWD, ".", os.O_PATH, 0, _RESOLVE_BENEATH))
            _kernel_resolves = True
        except OSError:
            _kernel_resolves = False
    return _kernel_resolves


def open_beneath(
    dir_fd: int,
    relative: str,
    flags: int,
    mode: int = 0o644,
    *,
    kernel: bool | None = None,
    root_paths: Sequence[str] = (),
) -> int:
    """Open `relative` under the folder `dir_fd`, no step of its resolution leaving that folder.

    Symlinks are followed while they stay beneath it: a relative one by the kernel (openat2), an absolute
    one by the walk below when it names a place under one of `root_paths` (the folder's own spellings).
    `kernel` False walks only; None: openat2 where it works. Leaving the folder raises OSError EXDEV."""
    relative = relative.strip("/") or "."
    if kernel is None:
        kernel = kernel_resolves_beneath()
    if kernel:
        try:
            return _openat2(dir_fd, relative, flags, mode, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        except OSError as exc:
            # openat2 refuses every absolute symlink, even one naming a place inside, and gives up when
            # renames keep racing its lookup: the walk decides those
            if not (exc.errno == errno.EXDEV and root_paths) and exc.errno != errno.EAGAIN:
                raise
    return _walk_beneath(dir_fd, relative, flags, mode, root_paths)


def _walk_beneath(dir_fd: int, relative: str, flags: int, mode: int, root_paths: Sequence[str]) -> int:
    """Component by component, each opened with O_NOFOLLOW relative to the one before, held open. A
    symlink met on the way is read and its target walked the same way (an absolute target from `dir_fd`
    again, if it lies under one of `root_paths`); `..` goes back to a folder this walk holds, never past
    `dir_fd`. Nothing is looked up by a name that could lead out after it was judged."""
    pending = [p for p in relative.split("/") if p not in ("", ".")]
    stack = [dir_fd]  # stack[0] is the caller's
    links = 0
    try:
        while pending:
            part = pending.pop(0)
            if part == "..":
                if len(stack) == 1:
                    raise OSError(errno.EXDEV, "'..' leads out of the folder", relative)
                os.close(stack.pop())
                continue
            fd = _step(part, flags if not pending else os.O_PATH | os.O_DIRECTORY, mode, stack[-1])
            if fd is not None and not pending:
                return fd
            if fd is not None:
                stack.append(fd)
                continue
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, "too many symlinks", relative)
            try:
                target = os.readlink(part, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                pending.insert(0, part)  # no longer a symlink: it changed since the step; look again
                continue
            if target.startswith("/"):
                inner = _beneath(target, root_paths)
                if inner is None:
                    raise OSError(errno.EXDEV, f"a symlink to {target}, out of the folder", relative)
                while len(stack) > 1:
                    os.close(stack.pop())
                target = inner
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=stack[-1])
    finally:
        for fd in stack[1:]:
            os.close(fd)


def _step(name: str, flags: int, mode: int, dir_fd: int) -> int | None:
    """`name` opened without following it; None when it is a symlink (the walk follows it itself)."""
    for attempt in range(_STEP_ATTEMPTS):
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
            break
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            if _is_link(name, dir_fd):
                return None
            if attempt == _STEP_ATTEMPTS - 1:  # no link now, yet the open saw one: it is being swapped
                raise
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH|O_NOFOLLOW opens the link itself
        os.close(fd)
        return None
    return fd


def _beneath(target: str, root_paths: Sequence[str]) -> str | None:
    """`target` relative to the root it names, or None when it names no place under one."""
    path = normal(target)
    for root in root_paths:
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return path[len(root) :].lstrip("/") or "."
    return None


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def real_path(fd: int) -> str:
    """Where the folder or file held by `fd` is now (the kernel's own record, not a name to trust)."""
    return os.readlink(f"/proc/self/fd/{fd}")


class PathGuard:
    """The user paths of one stage process: each resolved once beneath its allowed root, held open, and
    handed to code as a view (see the module's docstring). With no allowed roots nothing confines the
    resolution, but paths are still pinned, so what was checked is what is used."""

    def __init__(
        self, roots: Sequence[Path], *, data_dir: Path | None = None, inherited_views: Path | None = None
    ) -> None:
        """`inherited_views`: the views folder of the stage process that started this one (a torchrun
        rank gets its launcher's params, whose paths are that process's views, already pinned)."""
        self.roots = [Path(r) for r in roots]
        self.data_dir = data_dir
        self.inherited_views = inherited_views
        self._views: Path | None = None
        self._cleanup: Callable[[], object] = lambda: None
        self._shown: dict[str, str] = {}
        self._held: list[int] = []
        self._root_fds: dict[Path, int] = {}
        self._root_paths: dict[int, tuple[str, ...]] = {}  # a root's descriptor → its spellings

    # --- inputs -------------------------------------------------------------------------------------
    def input(self, path: str | Path) -> Path:
        """A view of the folder or file at `path`, resolved beneath its root now. A path that does not exist
        gets a view that does not either (the stage then reports it missing, under the user's name)."""
        if self.is_view(path):
            return Path(path)
        root_fd, relative = self._root_of(str(path))
        try:
            fd = self._open(root_fd, relative, os.O_PATH, path)
        except FileNotFoundError:
            return self._view(None, str(path))
        return self._view(fd, str(path))

    # --- outputs ------------------------------------------------------------------------------------
    def output_parent(self, path: str | Path) -> Path:
        """`path` as <view of its parent folder>/<its name>: the parent made if missing and pinned, the name
        left for the writer to make or open without following it. Refused where contract/paths.py says."""
        if self.is_view(Path(path).parent):
            return Path(path)
        shown = normal(path)
        parent, name = posixpath.split(shown)
        if name in ("", ".", ".."):
            raise PathRefused(path, f"{path} names no folder or file to write", TerminationReason.BAD_INPUT)
        self.check_output(shown)
        root_fd, relative = self._root_of(shown)  # the output's own root: an output never is one
        fd = self._folder_made(root_fd, posixpath.dirname(relative), shown)
        try:
            self.check_output(posixpath.join(real_path(fd), name), shown=shown)
        except PathRefused:
            os.close(fd)
            raise
        return self._view(fd, parent) / name

    def check_output(self, path: str, *, shown: str | None = None) -> None:
        """Refuse an output that is, holds or lies in the data folder, an allowed root or the install."""
        data = [] if self.data_dir is None else [normal(self.data_dir), normal(Path(self.data_dir).resolve())]
        roots = {normal(r) for r in self.roots} | {normal(r.resolve()) for r in self.roots}
        problem = output_problem(path, data_dirs=data, roots=sorted(roots))
        if problem is not None:
            where = f"{shown} resolves to {path}: " if shown and shown != path else ""
            raise PathRefused(shown or path, where + problem, TerminationReason.PATH_NOT_ALLOWED)

    def _folder_made(self, root_fd: int, relative: str, shown: str) -> int:
        """The folder at `relative` under the root, each missing step made relative to the one above it."""
        parts = [p for p in relative.split("/") if p not in ("", ".")]
        current = os.dup(root_fd)
        try:
            for depth, part in enumerate(parts):
                try:
                    found = self._open(root_fd, "/".join(parts[: depth + 1]), DIRECTORY, shown)
                except FileNotFoundError:
                    with contextlib.suppress(FileExistsError):  # made meanwhile (another rank)
                        os.mkdir(part, 0o755, dir_fd=current)
                    found = self._open(current, part, DIRECTORY | os.O_NOFOLLOW, shown)
                os.close(current)
                current = found
        except BaseException:
            os.close(current)
            raise
        return current

    # --- views --------------------------------------------------------------------------------------
    def view_of(self, fd: int, shown: str) -> Path:
        """A view of a descriptor this guard now holds (closed with the guard)."""
        self._held.append(fd)
        return self._view(fd, shown, held=True)

    def _view(self, fd: int | None, shown: str, *, held: bool = False) -> Path:
        if fd is not None and not held:
            self._held.append(fd)
        folder = self.views_folder() / str(len(self._shown))
        folder.mkdir()
        view = folder / (posixpath.basename(normal(shown)) or "root")
        if fd is not None:
            target = f"/proc/{os.getpid()}/fd/{fd}"
            os.symlink(target, view)
            self._shown[target] = shown
        self._shown[str(view)] = shown
        return view

    def views_folder(self) -> Path:
        """The private folder (mode 0700, the system's temporary folder) holding this guard's views: apart
        from every user and job folder, removed when the guard is closed or collected."""
        if self._views is None:
            self._views = Path(tempfile.mkdtemp(prefix=VIEWS_PREFIX))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._views, True)
        return self._views

    def is_view(self, path: str | Path) -> bool:
        """Whether `path` is a view of this guard or of the stage process that started this one."""
        return any(
            folder is not None and Path(path).is_relative_to(folder)
            for folder in (self._views, self.inherited_views)
        )

    def describe(self, text: str) -> str:
        """`text` with every view and held descriptor's /proc path replaced by the user's path."""
        for view in sorted(self._shown, key=len, reverse=True):
            if view in text:
                text = text.replace(view, self._shown[view])
        return text

    def describe_all(self, value: Any) -> Any:
        """`describe` through every string of an event (dicts, lists)."""
        if isinstance(value, str):
            return self.describe(value)
        if isinstance(value, dict):
            return {k: self.describe_all(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.describe_all(v) for v in value]
        return value

    def close(self) -> None:
        for fd in self._held + list(self._root_fds.values()):
            os.close(fd)
        self._held, self._root_fds, self._root_paths = [], {}, {}
        self._cleanup()
        self._views = None

    # --- resolution ---------------------------------------------------------------------------------
    def _root_of(self, path: str) -> tuple[int, str]:
        """(descriptor of the allowed root `path` lies under, the rest of `path`); "/" with no roots."""
        target = normal(path)
        if not self.roots:
            return self._root_fd(Path("/")), target.lstrip("/")
        for root in self.roots:
            for spelling in dict.fromkeys((normal(root), normal(root.resolve()))):
                if target == spelling or target.startswith(spelling.rstrip("/") + "/"):
                    return self._root_fd(root), target[len(spelling) :].lstrip("/")
        raise PathRefused(
            path,
            f"path {path} is outside the host's allowed roots ({', '.join(str(r) for r in self.roots)})",
            TerminationReason.PATH_NOT_ALLOWED,
        )

    def _root_fd(self, root: Path) -> int:
        if root not in self._root_fds:
            fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self._root_fds[root] = fd
            self._root_paths[fd] = tuple(dict.fromkeys((normal(root), normal(real_path(fd)))))
        return self._root_fds[root]

    def _open(self, dir_fd: int, relative: str, flags: int, shown: str | Path) -> int:
        try:
            if not self.roots:  # nothing to stay beneath: resolve as the system does, but only once
                return os.open(relative.strip("/") or ".", flags | os.O_CLOEXEC, dir_fd=dir_fd)
            return open_beneath(dir_fd, relative, flags, root_paths=self._root_paths.get(dir_fd, ()))
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.ELOOP):
                raise PathRefused(
                    shown,
                    f"path {shown} leads outside the host's allowed roots "
                    f"({', '.join(str(r) for r in self.roots)}) through a symlink or '..'",
                    TerminationReason.PATH_NOT_ALLOWED,
                ) from None
            if exc.errno == errno.ENOTDIR:
                raise PathRefused(
                    shown, f"{shown}: a part of this path is not a folder", TerminationReason.BAD_INPUT
                ) from None
            raise
