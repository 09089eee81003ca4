"""Child processes of the benchmarks, through the project's one process runner (drafting/proc.py): an
argument list, its own process group, a timeout, and its output kept line by line."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drafting import proc

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Ran:
    """A finished child: its exit, its wall time, and its lines by stream."""

    result: proc.CommandResult
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result.ok

    def tail(self, lines: int = 20) -> str:
        return "\n".join([*self.stdout, *self.stderr][-lines:])


def run(argv: Sequence[str], *, timeout_s: float | None = None, log: Path | None = None) -> Ran:
    """`argv` run to its end from the repository root (so `python -m bench.…` and the product import), its
    lines kept, and with `log` also appended there as they come."""
    ran = Ran(proc.CommandResult(0, False, False, 0, 0.0))
    sink = log.open("a", encoding="utf-8") if log is not None else None

    def keep(stream: str, text: str) -> None:
        (ran.stdout if stream == "stdout" else ran.stderr).append(text)
        if sink is not None:
            sink.write(text + "\n")
            sink.flush()

    try:
        ran.result = proc.run_command(argv, on_line=keep, cwd=ROOT, timeout_s=timeout_s)
    finally:
        if sink is not None:
            sink.close()
    return ran


def python_module(module: str, *args: str) -> list[str]:
    """The argv that runs `python -m module args…` with this interpreter."""
    return [sys.executable, "-m", module, *args]
