"""Run a read that must be refused in a forked child with a memory limit and an alarm.

A regression that reads /dev/zero does so inside one C call (readline, read) that never returns to Python,
so pytest's timeout cannot stop it and it grows until the machine runs out of memory (14 GB in 49 s). In a
child whose data segment is capped and whose SIGALRM kills it, the same regression is a prompt, clean
test failure on a shared machine.
"""

from __future__ import annotations

import json
import os
import resource
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Outcome:
    raised: str | None  # the exception's class name, None when the call returned
    message: str = ""
    path: str | None = None
    problem: str | None = None


def _data_bytes() -> int:
    with open("/proc/self/status") as status:  # this process's own file
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def run_guarded(call: Callable[[], Any], *, timeout_s: int = 20, memory_mb: int = 512) -> Outcome:
    """What `call()` raised in a child limited to `memory_mb` more data and `timeout_s` seconds."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanup
        try:
            os.close(read_fd)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # kill, even inside a C call
            limit = _data_bytes() + memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
            signal.alarm(timeout_s)
            report: dict[str, Any] = {"raised": None}
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
                report = {
                    "raised": type(exc).__name__,
                    "message": str(exc)[:2000],
                    "path": str(exc.path) if getattr(exc, "path", None) is not None else None,
                    "problem": getattr(exc, "problem", None),
                }
            os.write(write_fd, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        signalled = os.WIFSIGNALED(status) and os.WTERMSIG(status)
        what = "hung (killed by its alarm)" if signalled == signal.SIGALRM else f"died (status {status})"
        raise AssertionError(f"the read {what} instead of being refused")
    return Outcome(**json.loads(data))
