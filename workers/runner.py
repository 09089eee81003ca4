"""Runs one job on this host: claim → preflight (GPU lease, GPU gate) → the stage's child process → GPU gate →
record. The stage process validates the params and checks their host paths before the stage starts.

The job's process is the worker's spare stage process when one is ready (workers/warm.py: started ahead,
imports done), else one started for it; the job is `running` once that process has accepted it.
The claim is committed before any process is handed the job (a stage never starts on a claim a failed
commit could undo: the re-sent job would run twice), then `running` is recorded once the process accepted
it. The database session is never held while the stage runs."""

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
from app.core.db import session_factory, session_scope
from app.jobs import lifecycle
from app.jobs.lifecycle import ClaimedJob, Outcome
from app.jobs.states import JobState
from app.servers import service as servers
from contract.reasons import TerminationReason
from drafting import proc
from drafting.hostinfo import gate
from drafting.hostinfo import gpus as nvml
from workers.events import EventPump
from workers.logship import LogShipper
from workers.stage_process import child_env, outcome_of, stage_job
from workers.warm import NotAccepted, StageProcesses

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


class _PendingClaim:
    """The claim's transaction, left open through preflight (GPU lease, gate) and committed before any process
    is handed the job. `commit` ends it (once); anything else that touches the job's row must wait for it, so
    every path of the runner commits it before storing anything else."""

    def __init__(self, session: Session | None) -> None:
        self._session = session

    def commit(self, then: Callable[[Session], object] | None = None) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            if then is not None:
                then(session)
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @property
    def open(self) -> bool:
        return self._session is not None


@dataclass
class _Held:
    """What one run of a job holds: its heartbeat, the claim transaction until committed, its leased GPUs.
    Released in one place (JobRunner._holding)."""

    job: ClaimedJob
    beat: _Heartbeat
    claim: _PendingClaim
    start_seq: int
    gpus: list[int] = field(default_factory=list)
    claim_lost: bool = False  # the claim's commit failed: the job is still queued and not this run's
    phases: list[tuple[str, float]] = field(default_factory=list)

    def phase(self, name: str) -> None:
        self.phases.append((name, time.perf_counter()))


@dataclass
class _StageIO:
    """The stage process's log shipper and event pump; `summary` is the last log line, written at close."""

    shipper: LogShipper
    pump: EventPump
    summary: str | None = None


class JobRunner:
    def __init__(self, settings: Settings, *, host: str, worker: str) -> None:
        self.settings = settings
        self.host = host
        self.worker = worker
        # A spare starts once the worker is ready (`stages.refill()`, workers/main.py) and after each job.
        self.stages = StageProcesses(child_env(settings, []), settings.data_dir.resolve())

    def run(self, job_id: uuid.UUID) -> None:
        received = time.perf_counter()
        claimed = self._claim(job_id)
        if claimed is None:
            logger.info("job %s is not ours to run (already claimed, cancelled or another host's)", job_id)
            return
        job, pending, start_seq = claimed
        with self._holding(job, pending, start_seq) as held:
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
            held.claim.commit()
            if held.claim_lost:
                return  # the broker's message is re-sent from the database (the job is still queued)
            if isinstance(outcome, Requeued):
                message = outcome.message
                self._store(job, "requeue", lambda s: lifecycle.requeue(s, job_id=job.id, message=message))
            else:
                self._record(job, outcome)

    def _claim(self, job_id: uuid.UUID) -> tuple[ClaimedJob, _PendingClaim, int] | None:
        """Claim the job (one UPDATE … RETURNING, which also gives where its log continues); a job that needs
        no GPU keeps the transaction open (see _PendingClaim). The pool does not ping a connection used
        moments ago (app/core/db.py), so a claim that meets a connection the database dropped since is
        tried once more, on a fresh one."""
        for attempt in (1, 2):
            session = session_factory(self.settings)()
            try:
                claimed = lifecycle.claim(session, job_id=job_id, host=self.host, worker=self.worker)
                if claimed is None:
                    session.commit()
                    session.close()
                    return None
            except DBAPIError as exc:
                session.rollback()
                session.close()
                if attempt == 1 and exc.connection_invalidated:
                    continue
                raise
            except BaseException:
                session.rollback()
                session.close()
                raise
            pending = _PendingClaim(session)
            if claimed.gpus_requested:
                pending.commit()  # the GPU lease and gate run in their own transactions
            return claimed, pending, claimed.log_seq
        raise AssertionError("unreachable")

    @contextmanager
    def _holding(self, job: ClaimedJob, pending: _PendingClaim, start_seq: int) -> Iterator[_Held]:
        # The job is heartbeaten from its claim until its end is stored: a reaper may judge it lost only when
        # this worker is gone, never while it prepares, waits for the database or records the outcome.
        beat = _Heartbeat(self.settings, job)
        held = _Held(job, beat, pending, start_seq)
        beat.start()
        try:
            yield held
        finally:
            held.claim.commit()  # a no-op unless something failed before the process was spawned
            beat.stop()

    @contextmanager
    def _stage_io(self, held: _Held) -> Iterator[_StageIO]:
        job = held.job
        log_file = self.settings.resolved_log_dir() / f"{job.id}.log"
        shipper = LogShipper(self.settings, job.id, file_path=log_file, start_seq=held.start_seq)
        io = _StageIO(shipper, EventPump(self.settings, job.id, self.host))
        try:
            shipper.on_line(
                "stderr", f"[eyas] attempt {job.attempt} of {job.kind} on {self.host} gpus={held.gpus or '-'}"
            )
            io.pump.start()
            yield io
        finally:
            io.pump.join()
            if held.gpus:
                verdict = gate.check(held.gpus)
                if not verdict.clean:
                    shipper.on_line("stderr", "[eyas] GPU gate after the job: " + "; ".join(verdict.problems))
            if io.summary is not None:
                shipper.on_line("stderr", io.summary)
            shipper.close()

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
            # The claim is stored before any process is handed the job: a stage must never start on a
            # claim that a failed commit (a database restart, say) undoes, or the re-sent job runs twice.
            try:
                held.claim.commit()
            except Exception as exc:  # noqa: BLE001 - any failure undoes the claim: the job is still queued
                logger.warning("job %s: its claim could not be stored (%s); it will be re-sent", job.id, exc)
                held.claim_lost = True
                return Outcome(state=JobState.FAILED, reason=TerminationReason.STAGE_ERROR, message=str(exc))
            try:
                taken = self.stages.take(
                    stage_job(job, params_file, work_dir, held.gpus, self.settings),
                    io.pump.write_fd,
                    before_waiting=lambda: None,  # the claim is committed already
                )
            except proc.CommandNotFound as exc:
                return Outcome(
                    state=JobState.FAILED, reason=TerminationReason.PREFLIGHT_FAILED, message=str(exc)
                )
            refused = taken.message if isinstance(taken, NotAccepted) else None
            result = proc.supervise(
                taken.process,
                on_line=io.shipper.on_line,
                timeout_s=job.timeout_s,
                cancel=held.beat.cancel,
                grace_s=self.settings.cancel_grace_s,
                on_start=(lambda started: self._started(held, started, io.pump)) if refused is None else None,
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

    def _started(self, held: _Held, started: proc.StartedProcess, pump: EventPump) -> None:
        held.phase("accepted")  # by its stage process (workers/warm.py)
        pump.child_started()

        def mark_running(session: Session) -> None:
            lifecycle.mark_running(
                session,
                job_id=held.job.id,
                pid=started.pid,
                pgid=started.pgid,
                create_time=started.create_time,
            )

        self._store(held.job, "its process", mark_running)
        held.phase("running")
        self.stages.refill()  # the next job's process starts now, off this one's path to `running`
        _log_phases(held)


def _log_phases(held: _Held) -> None:
    if logger.isEnabledFor(logging.DEBUG) and held.phases:
        start = held.phases[0][1]
        steps = " ".join(f"{name}={(at - start) * 1000:.1f}ms" for name, at in held.phases[1:])
        logger.debug("job %s dispatch: %s", held.job.id, steps)


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
            except Exception as exc:  # noqa: BLE001 - the database may be restarting; the next beat tries again
                logger.warning("heartbeat for job %s failed: %s", self.job.id, exc)

    def stop(self) -> None:
        self._stop.set()
