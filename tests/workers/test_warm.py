"""Warm stage processes (workers/warm.py): a spare started ahead takes a job and becomes that job's own
process — its own process group, its output streamed, its events on the job's pipe, the job's folder — and a
job a spare cannot take (the spare died; the job's environment is not the spare's, as a GPU job's) gets a
fresh process. Real processes throughout (`python -m workers.stage_main`)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from drafting import proc
from workers import handoff
from workers.warm import Accepted, NotAccepted, StageProcesses

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def base_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "VIRTUAL_ENV")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return {**env, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}


def selftest_job(work_dir: Path, env: dict[str, str], **params: Any) -> handoff.StageJob:
    work_dir.mkdir(parents=True, exist_ok=True)
    params_file = work_dir / "params.json"
    params_file.write_text(json.dumps({"lines": 2, **params}))
    args = ["--kind", "selftest", "--params-file", str(params_file), "--work-dir", str(work_dir)]
    return handoff.StageJob(args=args, env=env, cwd=str(work_dir))


class Run:
    """One job through `take` and `proc.supervise`, as the runner does it."""

    def __init__(
        self, stages: StageProcesses, job: handoff.StageJob, *, timeout_s: float | None = 60
    ) -> None:
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []
        read_fd, write_fd = os.pipe()
        reader = threading.Thread(target=self._read_events, args=(read_fd,))
        reader.start()
        try:
            self.taken = stages.take(job, write_fd)
        finally:
            os.close(write_fd)  # the process holds its own copy now
        self.result = proc.supervise(
            self.taken.process, on_line=lambda _s, text: self.lines.append(text), timeout_s=timeout_s
        )
        reader.join()

    def _read_events(self, fd: int) -> None:
        with os.fdopen(fd, encoding="utf-8") as stream:
            self.events.extend(json.loads(line) for line in stream)

    def result_event(self) -> dict[str, Any]:
        (event,) = [e for e in self.events if e["type"] == "result"]
        return event


def ready_spares(stages: StageProcesses, count: int, timeout_s: float = 60) -> list[int]:
    """Start spares and wait until `count` of them finished their imports; returns their pids."""
    stages.refill()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        spares = list(stages._spares)
        if len(spares) >= count and all(handoff.is_ready(s.sock) for s in spares):
            return [s.process.started.pid for s in spares]
        time.sleep(0.05)
    raise AssertionError("the spares never got ready")


def test_a_spare_becomes_the_jobs_own_process(tmp_path: Path) -> None:
    stages = StageProcesses(base_env(), tmp_path, spares=1)
    try:
        (spare_pid,) = ready_spares(stages, 1)
        run = Run(stages, selftest_job(tmp_path / "job", base_env()))
    finally:
        stages.close()

    assert isinstance(run.taken, Accepted)
    assert not run.taken.waited  # a ready spare: the job never waited on an interpreter
    started = run.taken.process.started
    assert started.pid == spare_pid
    assert started.pgid == spare_pid  # its own process group, as every job's process
    assert run.result.exit_code == 0, run.lines
    assert run.lines == ["line 0", "line 1"]
    assert run.result_event()["result"] == {"lines": 2, "stderr_lines": 0}


def test_a_waiting_process_moves_into_the_jobs_folder_and_gets_its_arguments(tmp_path: Path) -> None:
    ours, theirs = handoff.socket_pair()
    job = handoff.StageJob(args=["--kind", "selftest"], env=base_env(), cwd=str(tmp_path / "job"))
    (tmp_path / "job").mkdir()
    code = (
        "import json, os, sys\n"
        "from workers import handoff\n"
        f"taken = handoff.receive({theirs.fileno()})\n"
        "assert taken is not None\n"
        "print(json.dumps([os.getcwd(), taken[0]]))\n"
    )
    process = proc.start(
        [sys.executable, "-c", code], env=base_env(), cwd=tmp_path, extra_fds=(theirs.fileno(),)
    )
    theirs.close()
    read_fd, write_fd = os.pipe()
    try:
        assert handoff.send(ours, job, write_fd, timeout_s=60)
    finally:
        os.close(write_fd)
        os.close(read_fd)
        ours.close()
    lines: list[str] = []
    result = proc.supervise(process, on_line=lambda _s, text: lines.append(text), timeout_s=60)
    assert result.exit_code == 0, lines
    assert json.loads(lines[-1]) == [str(tmp_path / "job"), ["--kind", "selftest"]]


def test_a_dead_spare_is_replaced_by_a_fresh_process(tmp_path: Path) -> None:
    stages = StageProcesses(base_env(), tmp_path, spares=1)
    try:
        (spare_pid,) = ready_spares(stages, 1)
        os.killpg(spare_pid, signal.SIGKILL)
        psutil.Process(spare_pid).wait(10)
        run = Run(stages, selftest_job(tmp_path / "job", base_env()))
    finally:
        stages.close()
    assert isinstance(run.taken, Accepted)
    assert run.taken.waited  # the fresh process's start-up: the caller is told the job waited for it
    assert run.taken.process.started.pid != spare_pid
    assert run.result.exit_code == 0
    assert run.lines == ["line 0", "line 1"]


def test_a_gpu_job_gets_a_process_started_with_its_gpus(tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES must be in a process's environment from its start: a spare (started without
    GPUs) never takes a job whose environment differs from its own, and stays for the next one."""
    stages = StageProcesses(base_env(), tmp_path, spares=1)
    try:
        (spare_pid,) = ready_spares(stages, 1)
        gpu_env = {**base_env(), "CUDA_VISIBLE_DEVICES": "0,1"}
        run = Run(stages, selftest_job(tmp_path / "job", gpu_env))
        assert isinstance(run.taken, Accepted)
        assert run.taken.process.started.pid != spare_pid
        assert run.result.exit_code == 0
        assert _alive(spare_pid)
        assert [s.process.started.pid for s in stages._spares] == [spare_pid]
    finally:
        stages.close()


def test_a_process_that_cannot_start_fails_the_job_with_its_output(tmp_path: Path) -> None:
    stages = StageProcesses(base_env(), tmp_path, spares=0)
    job = selftest_job(tmp_path / "job", {**base_env(), "PYTHONHOME": str(tmp_path / "no-python-here")})
    run = Run(stages, job)
    assert isinstance(run.taken, NotAccepted)
    assert "did not take its job" in run.taken.message
    assert run.result.exit_code != 0
    assert any("encoding" in line or "Python" in line for line in run.lines), run.lines


def test_spares_end_with_their_worker(tmp_path: Path) -> None:
    stages = StageProcesses(base_env(), tmp_path, spares=2)
    pids = ready_spares(stages, 2)
    stages.close()
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_spare_left_behind_exits_when_its_worker_end_closes(tmp_path: Path) -> None:
    """A killed worker cannot end its spares: each reads end-of-file on its job socket and exits."""
    ours, theirs = handoff.socket_pair()
    argv = [sys.executable, "-m", "workers.stage_main", "--job-socket", str(theirs.fileno())]
    process = proc.start(argv, env=base_env(), cwd=tmp_path, extra_fds=(theirs.fileno(),))
    theirs.close()
    assert _wait_ready(ours)
    ours.close()
    result = proc.supervise(process, on_line=lambda _s, _t: None, timeout_s=30)
    assert (result.exit_code, result.timed_out) == (0, False)


def _wait_ready(sock: Any, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if handoff.is_ready(sock):
            return True
        time.sleep(0.05)
    return False
