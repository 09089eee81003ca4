"""Runs one job on this host: claim → preflight (paths, GPU lease, GPU gate) → the stage's child process →
GPU gate → record. The database session is never held while the stage runs."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs import lifecycle
from app.jobs.lifecycle import ClaimedJob, Outcome
from app.jobs.states import JobState
from app.logs import repository as logs_repo
from app.servers import service as servers
from contract.reasons import TerminationReason
from contract.stages import STAGES
from drafting import proc
from drafting.hostinfo import gate
from drafting.stages.base import StageContext, StageError
from workers.events import EventPump
from workers.logship import LogShipper

logger = logging.getLogger("eyas.runner")
PROJECT_ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


@dataclass(frozen=True)
class Requeued:
    message: str


class JobRunner:
    def __init__(self, settings: Settings, *, host: str, worker: str) -> None:
        self.settings = settings
        self.host = host
        self.worker = worker

    def run(self, job_id: uuid.UUID) -> None:
        with session_scope(self.settings) as session:
            claimed = lifecycle.claim(session, job_id=job_id, host=self.host, worker=self.worker)
        if claimed is None:
            logger.info("job %s is not ours to run (already claimed, cancelled or another host's)", job_id)
            return
        # The job is heartbeaten from its claim until its end is stored: a reaper may judge it lost only when
        # this worker is gone, never while it prepares, waits for the database or records the outcome.
        beat = _Heartbeat(self.settings, claimed)
        beat.start()
        try:
            try:
                outcome = self._run_claimed(claimed, beat)
            except Exception:
                logger.exception("job %s crashed the runner", job_id)
                outcome = Outcome(
                    JobState.FAILED, TerminationReason.STAGE_ERROR, traceback.format_exc(limit=5)
                )
            if isinstance(outcome, Requeued):
                message = outcome.message
                self._store(
                    claimed, "requeue", lambda s: lifecycle.requeue(s, job_id=claimed.id, message=message)
                )
            else:
                self._record(claimed, outcome)
        finally:
            beat.stop()

    def _store(self, job: ClaimedJob, what: str, action: Callable[[Session], T]) -> T:
        """Run `action` in a transaction, retrying while the database is unreachable (a restart): what a job
        did must not be dropped because the database was away when it happened. Other errors propagate."""
        delay = 0.05
        while True:
            try:
                with session_scope(self.settings) as session:
                    return action(session)
            except (OperationalError, InterfaceError, PoolTimeout) as exc:
                if WORKER_STOPPING.event.is_set():
                    raise  # this worker must end now; a reaper settles the job
                logger.warning("job %s: %s not stored yet (%s); retrying", job.id, what, exc)
            time.sleep(delay)
            delay = min(delay * 2, self.settings.heartbeat_s)

    def _run_claimed(self, job: ClaimedJob, beat: _Heartbeat) -> Outcome | Requeued:
        work_dir = self.settings.data_dir.resolve() / "jobs" / str(job.id)
        ctx = StageContext(work_dir=work_dir, allowed_roots=tuple(self.settings.allowed_roots))
        try:
            for path in _host_paths(job):
                ctx.check_path(path)
        except StageError as exc:
            return Outcome(JobState.FAILED, exc.reason, exc.message)
        gpus: list[int] = []
        if job.gpus_requested:
            leased = self._lease(job)
            if not isinstance(leased, list):
                return leased
            gpus = leased
        return self._execute(job, work_dir, gpus, beat)

    def _lease(self, job: ClaimedJob) -> list[int] | Outcome | Requeued:
        inventory = gate.nvml.inventory()
        if len(inventory.gpus) < job.gpus_requested:
            why = inventory.error or f"the host has {len(inventory.gpus)} GPU(s)"
            return Outcome(
                JobState.FAILED,
                TerminationReason.NO_GPU,
                f"job needs {job.gpus_requested} GPU(s) but host {self.host} cannot provide them: {why}",
            )
        with session_scope(self.settings) as session:
            indices = lifecycle.lease_gpus(session, job_id=job.id, host=self.host, count=job.gpus_requested)
        if indices is None:
            return Requeued(f"waiting for {job.gpus_requested} free GPU(s) on {self.host}")
        verdict = gate.check(indices)
        if not verdict.clean:
            return Outcome(
                JobState.FAILED,
                TerminationReason.GPU_NOT_CLEAN,
                "GPU gate before start: " + "; ".join(verdict.problems),
                result={"gpu_gate": verdict.to_dict()},
            )
        return indices

    def _execute(self, job: ClaimedJob, work_dir: Path, gpus: list[int], beat: _Heartbeat) -> Outcome:
        work_dir.mkdir(parents=True, exist_ok=True)
        params_file = work_dir / "params.json"
        params_file.write_text(json.dumps(job.params))
        log_file = self.settings.resolved_log_dir() / f"{job.id}.log"
        start_seq = self._store(job, "log position", lambda s: logs_repo.last_seq(s, job.id))
        shipper = LogShipper(self.settings, job.id, file_path=log_file, start_seq=start_seq)
        shipper.on_line(
            "stderr", f"[eyas] attempt {job.attempt} of {job.kind} on {self.host} gpus={gpus or '-'}"
        )
        pump = EventPump(self.settings, job.id, self.host)
        cancel = beat.cancel
        pump.start()
        try:
            result = proc.run_command(
                _child_argv(job, params_file, work_dir, gpus, pump.write_fd, self.settings),
                on_line=shipper.on_line,
                env=_child_env(self.settings, gpus),
                cwd=work_dir,
                timeout_s=job.timeout_s,
                cancel=cancel,
                grace_s=self.settings.cancel_grace_s,
                on_start=lambda started: self._started(job, started, pump),
                extra_fds=(pump.write_fd,),
            )
        except proc.CommandNotFound as exc:
            pump.child_started()
            pump.join()
            shipper.close()
            return Outcome(JobState.FAILED, TerminationReason.PREFLIGHT_FAILED, str(exc))
        pump.join()
        outcome = _outcome(result, pump, job, beat)
        if gpus:
            verdict = gate.check(gpus)
            if not verdict.clean:
                shipper.on_line("stderr", "[eyas] GPU gate after the job: " + "; ".join(verdict.problems))
        shipper.on_line("stderr", f"[eyas] {outcome.state.value}: {outcome.reason} (exit {result.exit_code})")
        shipper.close()
        return outcome

    def _started(self, job: ClaimedJob, started: proc.StartedProcess, pump: EventPump) -> None:
        pump.child_started()
        self._store(
            job,
            "its process",
            lambda s: lifecycle.mark_running(
                s, job_id=job.id, pid=started.pid, pgid=started.pgid, create_time=started.create_time
            ),
        )

    def _record(self, job: ClaimedJob, outcome: Outcome) -> None:
        def record(session: Session) -> None:
            if not lifecycle.finish(session, self.settings, job_id=job.id, outcome=outcome, claimed=job):
                logger.warning(
                    "job %s: attempt %d was given up as lost; its end is not recorded", job.id, job.attempt
                )
                return
            server_state = "stopped" if outcome.state != JobState.FAILED else "failed"
            servers.end_server_of_job(session, job_id=job.id, state=server_state, message=outcome.message)
            lifecycle.mark_reaped(session, job_id=job.id)

        self._store(job, "its outcome", record)


class WorkerStopping:
    """Set when this worker process must end now (its `eyas up` is gone): running jobs are stopped like a
    cancel, but recorded as lost with the reason, so nobody mistakes them for a user's cancel."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = ""

    def stop(self, reason: str) -> None:
        self.reason = reason
        self.event.set()


WORKER_STOPPING = WorkerStopping()


class _Heartbeat(threading.Thread):
    """Beats for the job every heartbeat_s; sets `cancel` at the next beat once a cancel was requested, the
    job is no longer this worker's (the reaper gave it up), or the worker is stopping."""

    def __init__(self, settings: Settings, job: ClaimedJob) -> None:
        super().__init__(name=f"heartbeat-{job.id}", daemon=True)
        self.settings, self.job = settings, job
        self.cancel = threading.Event()
        self._stop = threading.Event()
        self.worker_stopped = False

    def run(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_s):
            if WORKER_STOPPING.event.is_set() and not self.cancel.is_set():
                self.worker_stopped = True
                self.cancel.set()
            try:
                with session_scope(self.settings) as session:
                    if lifecycle.heartbeat(
                        session, job_id=self.job.id, worker=self.job.worker, attempt=self.job.attempt
                    ):
                        self.cancel.set()
            except Exception as exc:  # the database may be restarting; the next beat tries again
                logger.warning("heartbeat for job %s failed: %s", self.job.id, exc)

    def stop(self) -> None:
        self._stop.set()


def _outcome(result: proc.CommandResult, pump: EventPump, job: ClaimedJob, beat: _Heartbeat) -> Outcome:
    if result.cancelled and beat.worker_stopped:
        return Outcome(
            JobState.FAILED,
            TerminationReason.WORKER_LOST,
            f"its worker stopped: {WORKER_STOPPING.reason}",
            result.exit_code,
        )
    if result.cancelled:
        return Outcome(JobState.CANCELLED, TerminationReason.USER_CANCELLED, "cancelled", result.exit_code)
    if result.timed_out:
        return Outcome(
            JobState.FAILED,
            TerminationReason.TIMEOUT,
            f"ran past its timeout of {job.timeout_s} s",
            result.exit_code,
        )
    if result.exit_code == 0 and pump.result is not None:
        return Outcome(JobState.SUCCEEDED, TerminationReason.SUCCEEDED, None, 0, pump.result)
    if pump.error is not None:
        details = pump.error.get("details") or None
        return Outcome(
            JobState.FAILED,
            str(pump.error.get("reason") or TerminationReason.STAGE_ERROR),
            str(pump.error.get("message")),
            result.exit_code,
            details,
        )
    return Outcome(
        JobState.FAILED,
        TerminationReason.NONZERO_EXIT,
        f"the stage process exited with {result.exit_code} without a result",
        result.exit_code,
    )


def _host_paths(job: ClaimedJob) -> list[str]:
    return STAGES[job.kind].parse(job.params).host_paths()


def _child_argv(
    job: ClaimedJob, params_file: Path, work_dir: Path, gpus: list[int], event_fd: int, settings: Settings
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "workers.stage_main",
        "--kind",
        job.kind,
        "--params-file",
        str(params_file),
        "--event-fd",
        str(event_fd),
        "--work-dir",
        str(work_dir),
        "--job-id",
        str(job.id),
        "--gpus",
        ",".join(map(str, gpus)),
    ]
    for root in settings.allowed_roots:
        argv += ["--allowed-root", str(root)]
    return argv


def _child_env(settings: Settings, gpus: list[int]) -> dict[str, str]:
    env = settings.child_env()
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(PROJECT_ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # so CUDA's numbering matches NVML's indices
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    return env
