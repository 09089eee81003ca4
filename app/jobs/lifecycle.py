"""Jobs as workers and the maintenance loop see them: claim, run, heartbeat, finish, reap, re-dispatch.

Each function runs inside a short transaction the caller owns; none commits.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.artifacts import service as artifacts_service
from app.core.config import Settings
from app.core.errors import AppError
from app.core.queue import enqueue_after_commit
from app.hosts import service as hosts_service
from app.jobs import refs, repository, results
from app.jobs.states import ACTIVE, TERMINAL, EventReason, JobState, TransitionConflict, plan, transition
from app.models.artifact import Artifact
from app.models.base import utcnow
from app.models.job import Job
from contract.reasons import TerminationReason


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs to run a job; a plain value, never an ORM object across sessions."""

    id: uuid.UUID
    kind: str
    params: dict[str, Any]
    host: str
    gpus_requested: int
    timeout_s: float | None
    attempt: int
    worker: str
    log_seq: int = 0  # the highest log line stored for the job: where this attempt's lines continue
    created_at: datetime | None = None


def claim(session: Session, *, job_id: uuid.UUID, host: str, worker: str) -> ClaimedJob | None:
    """queued → starting, with its event, atomically and in one statement (repository.claim); None when the
    job is not ours to run (duplicate, cancelled…)."""
    row = repository.claim(session, job_id, host=host, worker=worker)
    if row is None:
        return None
    return ClaimedJob(
        id=job_id,
        kind=row.kind,
        params=dict(row.params),
        host=host,
        gpus_requested=row.gpus_requested,
        timeout_s=row.timeout_s,
        attempt=row.attempt,
        worker=worker,
        log_seq=row.log_seq,
        created_at=row.created_at,
    )


def lease_gpus(session: Session, *, job_id: uuid.UUID, host: str, count: int) -> list[int] | None:
    indices = hosts_service.try_acquire_gpus(session, host=host, count=count, job_id=job_id)
    if indices is not None:
        job = repository.get(session, job_id)
        assert job is not None
        job.gpu_indices = indices
    return indices


def requeue(session: Session, *, job_id: uuid.UUID, message: str) -> None:
    """starting → queued (e.g. its GPUs are busy); the reconciler sends it again later."""
    job = repository.get(session, job_id)
    if job is None or job.state != JobState.STARTING:
        return
    transition(
        session,
        job,
        JobState.QUEUED,
        reason=EventReason.REQUEUED,
        message=message,
        extra={"attempt": max(0, job.attempt - 1), "dispatched_at": utcnow()},
    )


def mark_running(
    session: Session, *, job_id: uuid.UUID, pid: int, pgid: int, create_time: float | None
) -> bool:
    """starting → running with the job's process and its event, in one statement (repository.apply_move); a
    job no longer starting (a cancel came first) gets its process recorded only, so the orphan sweep still
    finds it. False if there is no job."""
    process = {"pid": pid, "pgid": pgid, "proc_create_time": create_time, "proc_reaped": False}
    if repository.apply_move(session, plan(job_id, JobState.STARTING, JobState.RUNNING, extra=process)):
        return True
    return repository.set_process(session, job_id, pid=pid, pgid=pgid, create_time=create_time)


def heartbeat(session: Session, *, job_id: uuid.UUID, worker: str, attempt: int) -> bool:
    """Returns True when the worker must end the job's process group: a cancel was requested, or this attempt
    no longer holds the job (it ended, or a reaper gave it up and it was queued or claimed again), so the
    job never runs twice at once."""
    found = repository.touch_heartbeat(session, job_id, worker, attempt)
    if found is None:
        return True
    state, cancel_requested_at, holds = found
    return not holds or state == JobState.CANCELLING or cancel_requested_at is not None


def record_progress(session: Session, *, job_id: uuid.UUID, fraction: float, message: str) -> None:
    job = repository.get(session, job_id)
    if job is not None and job.state not in TERMINAL:
        job.progress, job.progress_message = fraction, message[:512]


def record_metrics(session: Session, *, job_id: uuid.UUID, rows: list[tuple[str, int, float]]) -> None:
    repository.add_metrics(session, job_id, rows)


def record_artifact(
    session: Session, *, job_id: uuid.UUID, host: str | None, kind: str, path: str, meta: dict[str, Any]
) -> Artifact:
    """Record what a job produced. Its parents are the artifacts its params were filled from, or else every
    artifact of the jobs it depended on."""
    job = repository.get(session, job_id)
    parents = refs.referenced(session, job) if job is not None and job.param_refs else []
    if not parents:
        parents = artifacts_service.produced_by(session, repository.dependency_ids(session, job_id))
    return artifacts_service.record_artifact(
        session, job_id=job_id, host=host, kind=kind, path=path, meta=meta, parents=parents
    )


@dataclass(frozen=True)
class Outcome:
    state: JobState
    reason: str
    message: str | None = None
    exit_code: int | None = None
    result: dict[str, Any] | None = None


def finish(
    session: Session,
    settings: Settings,
    *,
    job_id: uuid.UUID,
    outcome: Outcome,
    claimed: ClaimedJob | None = None,
) -> bool:
    """Record how the job ended, release its GPUs, then start or fail the jobs that wait on it.

    With `claimed` (a worker's attempt), only while that attempt still holds the job: once a reaper gave it
    up and it was queued or claimed again, this attempt's end is not the job's, nor are its GPU leases.
    Returns False when the job is not (or no longer) this attempt's.
    """
    job = repository.get(session, job_id)
    if job is None:
        return False
    if claimed is not None and (
        (job.worker, job.attempt) != (claimed.worker, claimed.attempt) or job.state not in ACTIVE | TERMINAL
    ):
        return False
    hosts_service.release_gpus(session, job_id)
    if job.state in TERMINAL:
        return True
    job.exit_code = outcome.exit_code
    job.result = outcome.result
    if outcome.state == JobState.SUCCEEDED:
        job.progress = 1.0
    transition(session, job, outcome.state, reason=outcome.reason, message=outcome.message)
    results.record(session, job_id=job.id, kind=job.kind, result=outcome.result)
    settle_dependents(session, settings, job)
    return True


def settle_dependents(session: Session, settings: Settings, job: Job) -> None:
    for dependent in repository.pending_dependents(session, job.id):
        if job.state != JobState.SUCCEEDED:
            transition(
                session,
                dependent,
                JobState.FAILED,
                reason=TerminationReason.DEPENDENCY_FAILED,
                message=f"dependency {job.id} ended {job.state} ({job.termination_reason})",
            )
            settle_dependents(session, settings, dependent)
            continue
        deps = repository.get_many(session, repository.dependency_ids(session, dependent.id))
        if all(d.state == JobState.SUCCEEDED for d in deps):
            _queue_dependent(session, settings, dependent)


def _queue_dependent(session: Session, settings: Settings, job: Job) -> None:
    """All dependencies succeeded: fill artifact references, re-validate, and queue the job."""
    try:
        refs.fill(session, job)
    except (refs.MissingArtifact, AppError) as exc:
        message = exc.detail if isinstance(exc, AppError) else str(exc)
        transition(session, job, JobState.FAILED, reason=TerminationReason.DEPENDENCY_FAILED, message=message)
        settle_dependents(session, settings, job)
        return
    transition(session, job, JobState.QUEUED, extra={"dispatched_at": utcnow(), "dispatch_count": 1})
    assert job.host is not None
    enqueue_after_commit(session, settings, str(job.id), job.host)


def reap_lost(session: Session, settings: Settings) -> list[uuid.UUID]:
    """Active jobs whose heartbeat stopped: WORKER_LOST (or queued again while attempts remain).

    "Stopped" is judged by the database's clock and never counts time the database itself was down (see
    repository.stale_active); the worker heartbeats a job from its claim until its end is recorded.
    """
    lost = []
    for job in repository.stale_active(session, settings.lost_after_s):
        message = f"no heartbeat from worker {job.worker} since {job.heartbeat_at:%Y-%m-%dT%H:%M:%SZ}"
        if lose(session, settings, job, message=message):
            lost.append(job.id)
    return lost


def lose(session: Session, settings: Settings, job: Job, *, message: str) -> bool:
    """The job's worker is gone: release its GPUs, retry it if attempts remain, else fail it WORKER_LOST."""
    hosts_service.release_gpus(session, job.id)
    try:
        if job.attempt < job.max_attempts and job.state != JobState.CANCELLING:
            transition(
                session,
                job,
                JobState.QUEUED,
                reason=TerminationReason.WORKER_LOST,
                message=message + "; retrying",
                extra={"dispatched_at": utcnow(), "gpu_indices": None},
            )
            assert job.host is not None
            enqueue_after_commit(session, settings, str(job.id), job.host)
        else:
            transition(session, job, JobState.FAILED, reason=TerminationReason.WORKER_LOST, message=message)
            settle_dependents(session, settings, job)
    except TransitionConflict:
        return False
    return True


def redispatch(session: Session, settings: Settings, *, now: datetime | None = None) -> int:
    """Re-send queued jobs nobody claimed (the broker lost them or was down): the DB is the record.

    The messages go out after the commit: sending hundreds of them inside the transaction held the rows'
    locks for seconds, and the heartbeats of jobs claimed meanwhile waited on them until reapers judged
    those jobs lost. A send that fails is retried after redispatch_after_s, like a message the broker lost.
    """
    now = now or utcnow()
    jobs = repository.undispatched(session, now - timedelta(seconds=settings.redispatch_after_s))
    for job in jobs:
        assert job.host is not None
        repository.mark_dispatched(session, job.id, now)
        enqueue_after_commit(session, settings, str(job.id), job.host)
    return len(jobs)


def orphans(session: Session, *, host: str) -> list[tuple[uuid.UUID, int, float | None, str]]:
    """(job id, pgid, create time, state) of process groups this host's worker started and may have left."""
    return [
        (j.id, j.pgid, j.proc_create_time, j.state)
        for j in repository.orphan_candidates(session, host)
        if j.pgid is not None
    ]


def mark_reaped(session: Session, *, job_id: uuid.UUID) -> None:
    job = repository.get(session, job_id)
    if job is not None:
        job.proc_reaped = True


def lose_orphaned(session: Session, settings: Settings, *, job_id: uuid.UUID, message: str) -> None:
    job = repository.get(session, job_id)
    if job is not None and job.state in ACTIVE:
        lose(session, settings, job, message=message)
