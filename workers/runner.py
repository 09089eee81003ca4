"""Runs one job on this host: claim → preflight (GPU lease, GPU gate) → the stage's child process → GPU gate →
record. The stage process validates the params and checks their host paths before the stage starts.

The job's process is the worker's spare stage process when one is ready (workers/warm.py: started ahead,
imports done), else one started for it; the job is `running` once that process has accepted it.
The claim is one statement that commits by itself (app/core/db.py autocommit_scope) before any process is
handed the job, so a stage never starts on a claim a failed commit could undo (the re-sent job would run
twice); `running` is recorded, also in one statement, as soon as the process accepted it. On that path no
thread is started before `running` is recorded: the job's heartbeat runs from its claim on a kept thread
(workers/kept_threads.py), its log shipper's and event pump's threads start once it is running (its output
and events wait in their pipes meanwhile). The database session is never held while the stage runs."""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import autocommit_scope, session_scope
from app.jobs import lifecycle
from app.jobs.lifecycle import ClaimedJob, Outcome
from app.jobs.states import JobState
from app.servers import service as servers
from contract.reasons import TerminationReason
from drafting import proc
from drafting.hostinfo import gate
from drafting.hostinfo import gpus as nvml
from workers.events import EventPump
from workers.kept_threads import KeptThreads
from workers.logship import LogShipper
from workers.stage_process import child_env, outcome_of, stage_job
from workers.warm import Accepted, NotAccepted, StageProcesses

logger = logging.getLogger("eyas.runner")
T = TypeVar("T")


@dataclass(frozen=True)
class Leased:
    """The job holds these GPUs, and they passed the gate."""

    gpus: list[int]


@dataclass(frozen=True)
class Refused:
    """The job cannot run here: it ends with this outcome."""

    outcome: Outcome


@dataclass(frozen=True)
class Requeued:
    """Not now (its GPUs are busy): back to the queue."""

    message: str


LeaseResult = Leased | Refused | Requeued


@dataclass
class _Held:
    """What one run of a job holds: its heartbeat, its leased GPUs. Released in one place
    (JobRunner._holding)."""

    job: ClaimedJob
    beat: _Heartbeat
    gpus: list[int] = field(default_factory=list)
    phases: list[tuple[str, float]] = field(default_factory=list)
    waited_for_interpreter: bool = False  # no ready spare took it (workers/warm.py Accepted.waited)

    def phase(self, name: str) -> None:
        self.phases.append((name, time.perf_counter()))


@dataclass
class _StageIO:
    """The stage process's log shipper and event pump; `summary` is the last log line, written at close.
    Their threads start with `start` (lines and events wait in memory and in the pipe until then)."""

    shipper: LogShipper
    pump: EventPump
    summary: str | None = None

    def start(self) -> None:
        self.shipper.start()
        self.pump.start()


class JobRunner:
    def __init__(self, settings: Settings, *, host: str, worker: str) -> None:
        self.settings = settings
        self.host = host
        self.worker = worker
        # A spare starts once the worker is ready (`stages.refill()`, workers/main.py) and after each job.
        self.stages = StageProcesses(child_env(settings, []), settings.data_dir.resolve())

    def run(self, job_id: uuid.UUID) -> None:
        received = time.perf_counter()
        job = self._claim(job_id)
        if job is None:
            logger.info("job %s is not ours to run (already claimed, cancelled or another host's)", job_id)
            return
        with self._holding(job) as held:
            held.phases.append(("received", received))
            held.phase("claimed")
            try:
                outcome = self._run_claimed(held)
            except Exception:
                logger.exception("job %s crashed the runner", job_id)
                outcome = Outcome(
                    state=JobState.FAILED,
                    reason=TerminationReason.STAGE_ERROR,
                    message=traceback.format_exc(limit=5),
                )
            if isinstance(outcome, Requeued):
                message = outcome.message
                self._store(job, "requeue", lambda s: lifecycle.requeue(s, job_id=job.id, message=message))
            else:
                self._record(job, outcome)

    def _claim(self, job_id: uuid.UUID) -> ClaimedJob | None:
        """Claim the job: one statement that commits by itself (UPDATE … RETURNING, with its event and first
        heartbeat; it also gives where the job's log continues). The pool does not ping a connection used
        moments ago (app/core/db.py), so a claim that meets a connection the database dropped since is tried
        once more, on a fresh one."""
        for attempt in (1, 2):
            try:
                with autocommit_scope(self.settings) as session:
                    return lifecycle.claim(session, job_id=job_id, host=self.host, worker=self.worker)
            except DBAPIError as exc:
                if attempt == 1 and exc.connection_invalidated:
                    continue
                raise
        raise AssertionError("unreachable")

    @contextmanager
    def _holding(self, job: ClaimedJob) -> Iterator[_Held]:
        # The job is heartbeaten from its claim until its end is stored: a reaper may judge it lost only when
        # this worker is gone, never while it prepares, waits for the database or records the outcome.
        beat = _Heartbeat(self.settings, job)
        beat.start()
        try:
            yield _Held(job, beat)
        finally:
            beat.stop()

    @contextmanager
    def _stage_io(self, held: _Held) -> Iterator[_StageIO]:
        job = held.job
        log_file = self.settings.resolved_log_dir() / f"{job.id}.log"
        shipper = LogShipper(self.settings, job.id, file_path=log_file, start_seq=job.log_seq, start=False)
        io = _StageIO(shipper, EventPump(self.settings, job.id, self.host))
        try:
            shipper.on_line(
                "stderr", f"[eyas] attempt {job.attempt} of {job.kind} on {self.host} gpus={held.gpus or '-'}"
            )
            yield io
        finally:
            io.start()  # a no-op unless the job ended before its process was handed it
            io.pump.join()
            if held.gpus:
                verdict = gate.check(held.gpus)
                if not verdict.clean:
                    shipper.on_line("stderr", "[eyas] GPU gate after the job: " + "; ".join(verdict.problems))
            if io.summary is not None:
                shipper.on_line("stderr", io.summary)
            shipper.close()

    def _store(
        self, job: ClaimedJob, what: str, action: Callable[[Session], T], *, one_statement: bool = False
    ) -> T:
        """Run `action` in a transaction (`one_statement`: each of its statements complete on its own and its
        own transaction, app/core/db.py autocommit_scope), retrying while the database is unreachable (a
        restart): what a job did must not be dropped because the database was away when it happened. Other
        errors propagate."""
        scope = autocommit_scope if one_statement else session_scope
        delay = 0.05
        while True:
            try:
                with scope(self.settings) as session:
                    return action(session)
            except (OperationalError, InterfaceError, PoolTimeout) as exc:
                if WORKER_STOPPING.event.is_set():
                    raise  # this worker must end now; a reaper settles the job
                logger.warning("job %s: %s not stored yet (%s); retrying", job.id, what, exc)
            time.sleep(delay)
            delay = min(delay * 2, self.settings.heartbeat_s)

    def _run_claimed(self, held: _Held) -> Outcome | Requeued:
        if held.job.gpus_requested:
            match self._lease(held.job):
                case Refused(outcome):
                    return outcome
                case Requeued() as requeued:
                    return requeued
                case Leased(gpus):
                    held.gpus = gpus
        return self._execute(held)

    def _lease(self, job: ClaimedJob) -> LeaseResult:
        inventory = nvml.inventory()
        if len(inventory.gpus) < job.gpus_requested:
            why = inventory.error or f"the host has {len(inventory.gpus)} GPU(s)"
            return Refused(
                Outcome(
                    state=JobState.FAILED,
                    reason=TerminationReason.NO_GPU,
                    message=f"job needs {job.gpus_requested} GPU(s) but host {self.host} cannot provide "
                    f"them: {why}",
                )
            )
        with session_scope(self.settings) as session:
            indices = lifecycle.lease_gpus(session, job_id=job.id, host=self.host, count=job.gpus_requested)
        if indices is None:
            return Requeued(f"waiting for {job.gpus_requested} free GPU(s) on {self.host}")
        verdict = gate.check(indices)
        if not verdict.clean:
            return Refused(
                Outcome(
                    state=JobState.FAILED,
                    reason=TerminationReason.GPU_NOT_CLEAN,
                    message="GPU gate before start: " + "; ".join(verdict.problems),
                    result={"gpu_gate": verdict.to_dict()},
                )
            )
        return Leased(indices)

    def _execute(self, held: _Held) -> Outcome:
        job = held.job
        work_dir = self.settings.data_dir.resolve() / "jobs" / str(job.id)
        work_dir.mkdir(parents=True, exist_ok=True)
        params_file = work_dir / "params.json"
        params_file.write_text(json.dumps(job.params))
        with self._stage_io(held) as io:
            held.phase("prepared")
            try:
                taken = self.stages.take(
                    stage_job(job, params_file, work_dir, held.gpus, self.settings), io.pump.write_fd
                )
            except proc.CommandNotFound as exc:
                return Outcome(
                    state=JobState.FAILED, reason=TerminationReason.PREFLIGHT_FAILED, message=str(exc)
                )
            io.pump.child_started()  # the process holds its copy of the event pipe (or none took the job)
            refused: str | None = None
            match taken:
                case Accepted(process, waited):
                    held.waited_for_interpreter = waited
                    self._started(held, process.started)
                case NotAccepted(_, message):
                    refused = message
            io.start()
            result = proc.supervise(
                taken.process,
                on_line=io.shipper.on_line,
                timeout_s=job.timeout_s,
                cancel=held.beat.cancel,
                grace_s=self.settings.cancel_grace_s,
            )
            io.pump.join()
            stopped = WORKER_STOPPING.reason if held.beat.worker_stopped else None
            outcome = outcome_of(result, io.pump, job, stopped, refused=refused)
            io.summary = f"[eyas] {outcome.state.value}: {outcome.reason} (exit {result.exit_code})"
            return outcome

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

    def _started(self, held: _Held, started: proc.StartedProcess) -> None:
        """The job's process accepted it: the job is `running` (one statement), and the next job's spare
        starts now, off this one's path. Its output waits in its pipes the few milliseconds until read."""
        held.phase("accepted")  # by its stage process (workers/warm.py)

        def mark_running(session: Session) -> None:
            lifecycle.mark_running(
                session,
                job_id=held.job.id,
                pid=started.pid,
                pgid=started.pgid,
                create_time=started.create_time,
            )

        self._store(held.job, "its process", mark_running, one_statement=True)
        held.phase("running")
        self.stages.refill()
        _log_phases(held)


def _log_phases(held: _Held) -> None:
    """DEBUG: each phase's time from the message's arrival, and that arrival from the job's creation (API,
    broker: this host's clock against the API host's)."""
    if logger.isEnabledFor(logging.DEBUG) and held.phases:
        start = held.phases[0][1]
        steps = " ".join(f"{name}={(at - start) * 1000:.1f}ms" for name, at in held.phases[1:])
        created = held.job.created_at
        ago = time.time() - (time.perf_counter() - start) - created.timestamp() if created else float("nan")
        spare = "waited for an interpreter" if held.waited_for_interpreter else "a ready spare"
        logger.debug(
            "job %s dispatch: received=%.1fms after created; %s (%s)", held.job.id, ago * 1000, steps, spare
        )


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


_BEATERS = KeptThreads("eyas-heartbeat")


class _Heartbeat:
    """Beats for the job every heartbeat_s, on a thread of its own (a kept one: starting it does not wait for
    a new thread to be scheduled); sets `cancel` at the next beat once a cancel was requested, the job is no
    longer this worker's (the reaper gave it up), or the worker is stopping."""

    def __init__(self, settings: Settings, job: ClaimedJob) -> None:
        self.settings, self.job = settings, job
        self.cancel = threading.Event()
        self._stop = threading.Event()
        self.worker_stopped = False

    def start(self) -> None:
        _BEATERS.run(self._beat)

    def _beat(self) -> None:
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
            except Exception as exc:  # noqa: BLE001 - the database may be restarting; the next beat tries again
                logger.warning("heartbeat for job %s failed: %s", self.job.id, exc)

    def stop(self) -> None:
        self._stop.set()
