"""Running a stage the way the worker runs it: `python -m workers.stage_main` through the process runner,
its events on a pipe, so tests can break its environment or kill it mid-run."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.params.common import StageParams
from drafting import proc


@dataclass
class StageRun:
    result: proc.CommandResult
    lines: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == event_type]


def run_stage_process(
    kind: str,
    params: StageParams,
    work_dir: Path,
    *,
    env: dict[str, str] | None = None,
    kill_when: Callable[[str], bool] | None = None,
    timeout_s: float = 300,
    args: Sequence[str] = (),
) -> StageRun:
    """Run the stage to its end, or SIGKILL its process group at the first log line `kill_when` accepts."""
    params_file = work_dir / f"{kind}-params.json"
    params_file.write_text(params.model_dump_json())
    read_fd, write_fd = os.pipe()
    events: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: events.extend(_read_events(read_fd)))
    reader.start()
    lines: list[str] = []
    started: list[proc.StartedProcess] = []

    def on_line(_stream: str, text: str) -> None:
        lines.append(text)
        if kill_when is not None and started and kill_when(text):
            os.killpg(started[0].pgid, signal.SIGKILL)

    argv = [sys.executable, "-m", "workers.stage_main", "--kind", kind, "--params-file", str(params_file)]
    argv += ["--event-fd", str(write_fd), "--work-dir", str(work_dir), *args]
    try:
        result = proc.run_command(
            argv,
            on_line=on_line,
            env={**os.environ, **(env or {})},
            timeout_s=timeout_s,
            extra_fds=[write_fd],
            on_start=started.append,
        )
    finally:
        os.close(write_fd)
        reader.join()
    return StageRun(result, lines, events)


def _read_events(fd: int) -> list[dict[str, Any]]:
    events = []
    with os.fdopen(fd, encoding="utf-8", errors="replace") as pipe:
        for line in pipe:
            try:
                events.append(json.loads(line))
            except ValueError:
                pass  # a line cut by a kill
    return events
