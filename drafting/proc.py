"""The one way eyas starts a process.

An argument list (never a shell), its own process group (start_new_session), an explicit environment, a
timeout, cancel (SIGTERM to the group, SIGKILL after a grace period, descendants that left the group
included), and stdout/stderr streamed line by line to a callback. Lines are decoded as UTF-8 with
replacement, NUL bytes replaced (PostgreSQL text cannot hold them) and very long lines truncated with a
marker, so no output a program writes can crash the reader.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

LineSink = Callable[[str, str], None]
"""(stream, text) with stream 'stdout' or 'stderr' and text without its newline."""

DEFAULT_MAX_LINE_BYTES = 64 * 1024
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class StartedProcess:
    pid: int
    pgid: int
    create_time: float


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    timed_out: bool
    cancelled: bool
    pid: int
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


class CommandNotFound(Exception):
    """The program to start does not exist or is not executable."""


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _terminate_with(parent: int) -> Callable[[], None] | None:
    """A preexec hook asking the kernel for SIGTERM when the parent dies (None where prctl does not exist).
    It only calls prctl and getppid, both async-signal-safe, as code between fork and exec must."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect: no signal would come
            os._exit(1)

    return arm


def clean_text(raw: bytes) -> str:
    """Decode bytes from a child as safe text: invalid UTF-8 replaced, NUL replaced."""
    return raw.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


def run_command(
    argv: Sequence[str],
    *,
    on_line: LineSink,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout_s: float | None = None,
    cancel: threading.Event | None = None,
    grace_s: float = 10.0,
    on_start: Callable[[StartedProcess], None] | None = None,
    extra_fds: Sequence[int] = (),
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    die_with_parent: bool = False,
) -> CommandResult:
    """Run argv to completion, streaming its output; end the whole group on timeout or cancel."""
    return supervise(
        start(argv, env=env, cwd=cwd, extra_fds=extra_fds, die_with_parent=die_with_parent),
        on_line=on_line,
        timeout_s=timeout_s,
        cancel=cancel,
        grace_s=grace_s,
        on_start=on_start,
        max_line_bytes=max_line_bytes,
    )


@dataclass(frozen=True)
class Unsupervised:
    """A process `start` began and nobody reads or waits for yet: `supervise` takes it from here. Its
    output waits in its pipes meanwhile (a process started ahead of its work, e.g. a warm stage process)."""

    popen: subprocess.Popen[bytes]
    started: StartedProcess


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    extra_fds: Sequence[int] = (),
    die_with_parent: bool = False,
) -> Unsupervised:
    """Start argv in its own process group with its output piped; `supervise` must follow (or terminate_group
    with its pid and popen, to give it up). die_with_parent: the child gets SIGTERM when the thread that
    started it dies, its process killed outright included (Linux), so a server a stage started cannot
    outlive a SIGKILLed stage and hold its GPUs: the stage's own group kill does not reach the server's."""
    _check_argv(argv)
    try:
        popen = subprocess.Popen(  # noqa: S603 - argv list, no shell
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=str(cwd) if cwd is not None else None,
            start_new_session=True,
            pass_fds=tuple(extra_fds),
            close_fds=True,
            preexec_fn=_terminate_with(os.getpid()) if die_with_parent else None,
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise CommandNotFound(f"cannot start {argv[0]!r}: {exc.strerror}") from exc
    return Unsupervised(popen, StartedProcess(popen.pid, popen.pid, _create_time(popen.pid)))


def supervise(
    process: Unsupervised,
    *,
    on_line: LineSink,
    timeout_s: float | None = None,
    cancel: threading.Event | None = None,
    grace_s: float = 10.0,
    on_start: Callable[[StartedProcess], None] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> CommandResult:
    """Stream a started process's output and wait for it; its timeout counts from now. `on_start` runs once
    its output is being read."""
    popen = process.popen
    started_at = time.monotonic()
    readers = [
        _start_reader(popen.stdout, "stdout", on_line, max_line_bytes),
        _start_reader(popen.stderr, "stderr", on_line, max_line_bytes),
    ]
    if on_start is not None:
        on_start(process.started)
    timed_out, cancelled = _wait(popen, timeout_s, cancel, grace_s)
    for reader in readers:
        reader.join()
    exit_code = popen.returncode if popen.returncode is not None else -9
    return CommandResult(exit_code, timed_out, cancelled, popen.pid, time.monotonic() - started_at)


def _check_argv(argv: Sequence[str]) -> None:
    if isinstance(argv, str | bytes) or not argv or any(not isinstance(a, str) for a in argv):
        raise ValueError("argv must be a non-empty list of strings (never a shell command line)")


def _wait(
    popen: subprocess.Popen[bytes],
    timeout_s: float | None,
    cancel: threading.Event | None,
    grace_s: float,
) -> tuple[bool, bool]:
    deadline = time.monotonic() + timeout_s if timeout_s else None
    while True:
        try:
            popen.wait(timeout=0.05)
            return False, False
        except subprocess.TimeoutExpired:
            pass
        if cancel is not None and cancel.is_set():
            terminate_group(popen.pid, grace_s=grace_s, popen=popen)
            return False, True
        if deadline is not None and time.monotonic() >= deadline:
            terminate_group(popen.pid, grace_s=grace_s, popen=popen)
            return True, False


def terminate_group(
    pgid: int,
    *,
    grace_s: float = 10.0,
    popen: subprocess.Popen[bytes] | None = None,
    expected_create_time: float | None = None,
) -> bool:
    """SIGTERM a process group, SIGKILL it (and descendants that left it) after grace_s.

    With expected_create_time, the group leader must still be the process eyas started (pid reuse guard);
    otherwise nothing is signalled. Returns True when something was signalled.
    """
    if expected_create_time is not None and not _same_process(pgid, expected_create_time):
        return False
    descendants = _descendants(pgid)
    if not _signal_group(pgid, signal.SIGTERM):
        _kill_all(descendants)
        return bool(descendants)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if popen is not None and popen.poll() is not None and not _group_alive(pgid):
            break
        if popen is None and not _group_alive(pgid):
            break
        time.sleep(0.05)
    descendants += _descendants(pgid)
    _signal_group(pgid, signal.SIGKILL)
    _kill_all(descendants)
    if popen is not None:
        popen.wait()
    return True


def process_alive(pid: int, expected_create_time: float) -> bool:
    """Whether `pid` is still the process that started at `expected_create_time` (pid reuse guard)."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and _same_process(pid, expected_create_time)
    except psutil.Error:
        return False


def process_create_time(pid: int) -> float:
    return _create_time(pid)


def signal_children(pid: int, sig: signal.Signals) -> int:
    """Send `sig` to the direct children of `pid` (a launcher's workers); returns how many got it."""
    sent = 0
    for child in _children(pid):
        try:
            child.send_signal(sig)
            sent += 1
        except psutil.Error:
            pass
    return sent


def group_alive(pgid: int, expected_create_time: float | None = None) -> bool:
    """Whether the group still has members (and, if given, its leader is the process eyas started)."""
    if (
        expected_create_time is not None
        and _pid_exists(pgid)
        and not _same_process(pgid, expected_create_time)
    ):
        return False
    return _group_alive(pgid)


def _start_reader(stream: IO[bytes] | None, name: str, on_line: LineSink, max_bytes: int) -> threading.Thread:
    assert stream is not None
    thread = threading.Thread(target=_read_lines, args=(stream, name, on_line, max_bytes), daemon=True)
    thread.start()
    return thread


def _read_lines(stream: IO[bytes], name: str, on_line: LineSink, max_bytes: int) -> None:
    """Split the stream into lines; a line past max_bytes is cut and the rest skipped up to its newline."""
    with stream:
        while True:
            chunk = stream.readline(max_bytes + 1)
            if not chunk:
                return
            if chunk.endswith(b"\n"):
                on_line(name, clean_text(chunk[:-1].rstrip(b"\r")))
                continue
            if len(chunk) <= max_bytes:  # last line without a newline
                on_line(name, clean_text(chunk))
                return
            skipped = _skip_to_newline(stream)
            extra = len(chunk) - max_bytes + skipped
            on_line(name, clean_text(chunk[:max_bytes]) + f" …[line truncated: {extra} more bytes]")


def _skip_to_newline(stream: IO[bytes]) -> int:
    skipped = 0
    while True:
        rest = stream.readline(_READ_CHUNK)
        if not rest:
            return skipped
        if rest.endswith(b"\n"):
            return skipped + len(rest) - 1
        skipped += len(rest)


def _create_time(pid: int) -> float:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0


# psutil's create_time on Linux is the process's start in ticks since boot plus /proc/stat's `btime`, which
# the kernel derives from the wall clock and rounds to whole seconds: read twice it can differ by one second
# (seen on a VM, where a watched process then looked ended). A reused pid belongs to a process that started
# after the first one ended, so a tolerance just over that second still tells them apart.
SAME_START_TOLERANCE_S = 1.5


def _same_process(pid: int, expected_create_time: float) -> bool:
    try:
        actual = float(psutil.Process(pid).create_time())
        return abs(actual - expected_create_time) < SAME_START_TOLERANCE_S
    except psutil.Error:
        return False


def _pid_exists(pid: int) -> bool:
    return bool(psutil.pid_exists(pid))


def _children(pid: int) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(pid).children()
        return children
    except psutil.Error:
        return []


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        descendants: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
        return descendants
    except psutil.Error:
        return []


def _kill_all(processes: list[psutil.Process]) -> None:
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) also succeeds for zombies; count only members that still run.
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    output: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a long-lived process (a service) in its own group; output goes to a file, or is inherited.

    The caller ends it with terminate_group(popen.pid, popen=popen).
    """
    _check_argv(argv)
    sink = output.open("ab") if output is not None else None
    try:
        return subprocess.Popen(  # noqa: S603 - argv list, no shell
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT if sink is not None else None,
            env=dict(env) if env is not None else None,
            cwd=str(cwd) if cwd is not None else None,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise CommandNotFound(f"cannot start {argv[0]!r}: {exc.strerror}") from exc
    finally:
        if sink is not None:
            sink.close()
