"""Fixtures for the serving tests: tiny model pairs, free ports, a recording stage context, the stand-in."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from drafting.context import RecordingSink, StageContext
from tests._torch_threads import one_torch_thread  # noqa: F401 - an autouse fixture for this folder
from testsupport.tiny_pair import TinyPair, make_pair

STANDIN_DIR = Path(__file__).parent / "standin"


@dataclass
class RecordingContext(StageContext):
    """A StageContext that keeps the job log lines it prints (the worker captures stdout instead)."""

    lines: list[str] = field(default_factory=list)

    def log(self, text: str, *, stream: str = "stdout") -> None:
        self.lines.append(text)

    @property
    def recording(self) -> RecordingSink:
        assert isinstance(self.sink, RecordingSink)
        return self.sink

    def server_states(self) -> list[str]:
        return [e["state"] for e in self.recording.of_type("server")]


@dataclass
class StageThread:
    """Runs a stage in a thread, as the worker runs it in a process, so the test can stop it."""

    ctx: RecordingContext
    thread: threading.Thread
    outcome: dict[str, Any] = field(default_factory=dict)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if not self.thread.is_alive():
                raise AssertionError(f"stage ended early: {self.outcome}")
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting; log tail:\n" + "\n".join(self.ctx.lines[-20:]))
            time.sleep(0.05)

    def stop(self, timeout_s: float = 60) -> dict[str, Any]:
        self.ctx.cancel.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "stage did not return after cancel"
        return self.outcome


def start_stage(run: Callable[[StageContext, Any], Any], ctx: RecordingContext, params: Any) -> StageThread:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run(ctx, params)
        except BaseException as exc:  # noqa: BLE001 - the test inspects whatever the stage raised
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return StageThread(ctx, thread, outcome)


@pytest.fixture
def ctx(tmp_path: Path) -> RecordingContext:
    return RecordingContext(work_dir=tmp_path)


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> TinyPair:
    """An 8-layer random target and a drafter fitted to it briefly (acceptance above 1: plumbing only)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return make_pair(tmp_path_factory.mktemp("pair"), fit_steps=30)
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def standin_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m sglang.launch_server` runs the stand-in: servers inherit the worker's PYTHONPATH."""
    existing = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(STANDIN_DIR), existing) if p))
