"""All SQL about jobs, their events, dependencies, idempotency keys and metrics."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, and_, false, func, not_, or_, select, update
from sqlalchemy.orm import Session

from app.jobs.states import ACTIVE, JobState, Move, plan
from app.models.base import utcnow
from app.models.job import IdempotencyKey, Job, JobDependency, JobEvent, JobMetric


def get(session: Session, job_id: uuid.UUID) -> Job | None:
    return session.get(Job, job_id)


def get_many(session: Session, job_ids: Sequence[uuid.UUID]) -> list[Job]:
    if not job_ids:
        return []
    return list(session.scalars(select(Job).where(Job.id.in_(job_ids))))


def add(session: Session, job: Job) -> None:
    session.add(job)


def page(
    session: Session,
    *,
    kind: str | None,
    state: str | None,
    host: str | None,
    pipeline_id: uuid.UUID | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
    include_dry_runs: bool = False,
) -> list[Job]:
    """Newest first; `after` is the (created_at, id) of the last row of the previous page. Dry-run launches
    (POST /v1/launch/render) are left out unless `include_dry_runs`."""
    query = select(Job)
    if not include_dry_runs:
        dry_run = func.coalesce(Job.params["dry_run"].as_boolean(), false())
        query = query.where(not_(and_(Job.kind == "launch", dry_run)))
    if kind:
        query = query.where(Job.kind == kind)
    if state:
        query = query.where(Job.state == state)
    if host:
        query = query.where(Job.host == host)
    if pipeline_id:
        query = query.where(Job.pipeline_id == pipeline_id)
    if after is not None:
        created_at, last_id = after
        query = query.where(
            or_(Job.created_at < created_at, and_(Job.created_at == created_at, Job.id < last_id))
        )
    query = query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit)
    return list(session.scalars(query))


def events(session: Session, job_id: uuid.UUID) -> list[JobEvent]:
    return list(session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))


def add_dependencies(session: Session, job_id: uuid.UUID, depends_on: Sequence[uuid.UUID]) -> None:
    for dep in depends_on:
        session.add(JobDependency(job_id=job_id, depends_on_id=dep))


def dependency_ids(session: Session, job_id: uuid.UUID) -> list[uuid.UUID]:
    query = select(JobDependency.depends_on_id).where(JobDependency.job_id == job_id)
    return list(session.scalars(query))


def pending_dependents(session: Session, job_id: uuid.UUID) -> list[Job]:
    query = (
        select(Job)
        .join(JobDependency, JobDependency.job_id == Job.id)
        .where(JobDependency.depends_on_id == job_id, Job.state == JobState.PENDING)
    )
    return list(session.scalars(query))


def _db_now(session: Session) -> ColumnElement[datetime] | datetime:
    """The database's clock on PostgreSQL, so heartbeats and the reaper's judgement share one clock whatever
    the hosts' clocks say; SQLite is only ever local (embedded mode), where this machine's clock is that.
    clock_timestamp(), not now(): a heartbeat that waited on a lock is as fresh as the moment it is written.
    """
    return func.clock_timestamp() if session.get_bind().dialect.name == "postgresql" else utcnow()


def stale_active(session: Session, lost_after_s: float) -> list[Job]:
    """Active jobs with no heartbeat for lost_after_s, by the database's clock.

    Time while the database itself was down is not held against a job: nobody could write a heartbeat
    then, so on PostgreSQL the period counts from the server's (re)start at the earliest.
    """
    period = timedelta(seconds=lost_after_s)
    now = _db_now(session)
    last_sign = (
        func.greatest(Job.heartbeat_at, func.pg_postmaster_start_time())
        if session.get_bind().dialect.name == "postgresql"
        else Job.heartbeat_at
    )
    query = select(Job).where(Job.state.in_([s.value for s in ACTIVE]), last_sign < now - period)
    # Rows someone is writing now (a heartbeat waiting on a lock, the job's end being recorded) are not
    # judged this time, and a heartbeat that commits first makes the row no longer match.
    return list(session.scalars(query.with_for_update(skip_locked=True)))


def undispatched(session: Session, dispatched_before: datetime, limit: int = 500) -> list[Job]:
    query = (
        select(Job)
        .where(
            Job.state == JobState.QUEUED,
            or_(Job.dispatched_at.is_(None), Job.dispatched_at < dispatched_before),
        )
        .order_by(Job.created_at)
        .limit(limit)
    )
    return list(session.scalars(query))


def mark_dispatched(session: Session, job_id: uuid.UUID, at: datetime) -> None:
    """Only while still queued: a job claimed meanwhile is not locked (its heartbeats would wait)."""
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state == JobState.QUEUED)
        .values(dispatched_at=at, dispatch_count=Job.dispatch_count + 1)
        .execution_options(synchronize_session=False)
    )


def touch_heartbeat(
    session: Session, job_id: uuid.UUID, worker: str, attempt: int
) -> tuple[str, datetime | None, bool] | None:
    """Record a heartbeat (database clock) on an active job while this worker's attempt holds it; returns
    (state, cancel_requested_at, whether the attempt still holds it), or None if there is no such job."""
    holds = and_(Job.state.in_([s.value for s in ACTIVE]), Job.worker == worker, Job.attempt == attempt)
    touched = session.execute(
        update(Job)
        .where(Job.id == job_id, holds)
        .values(heartbeat_at=_db_now(session))
        .execution_options(synchronize_session=False)
    )
    row = session.execute(select(Job.state, Job.cancel_requested_at).where(Job.id == job_id)).one_or_none()
    return (row[0], row[1], touched.rowcount == 1) if row else None  # type: ignore[attr-defined]


class ClaimRow(NamedTuple):
    """What the claim's UPDATE … RETURNING reads back: the job as claimed (attempt already counted)."""

    kind: str
    params: dict[str, Any]
    gpus_requested: int
    timeout_s: float | None
    attempt: int
    log_seq: int


def claim(session: Session, job_id: uuid.UUID, *, host: str, worker: str) -> ClaimRow | None:
    """queued → starting in one statement: `UPDATE job … WHERE id = :id AND state = 'queued' AND host = :host
    RETURNING …`, with the first heartbeat (database clock); None when it matched nothing (a duplicate
    delivery, a cancelled job, another host's). A second claimer racing this one waits on the row lock, then
    finds the job no longer queued. The event row is added to the session and goes out with the next flush
    (the commit, or with `running`'s in one INSERT on the fast path)."""
    move = plan(
        job_id,
        JobState.QUEUED,
        JobState.STARTING,
        extra={"worker": worker, "attempt": Job.attempt + 1, "heartbeat_at": _db_now(session)},
    )
    row = session.execute(
        update(Job)
        .where(*move.where, Job.host == host)
        .values(**move.values)
        .returning(Job.kind, Job.params, Job.gpus_requested, Job.timeout_s, Job.attempt, Job.log_seq),
        execution_options={"synchronize_session": "fetch", "autoflush": False},
    ).one_or_none()
    if row is None:
        return None
    session.add(move.event())
    return ClaimRow(*row)


def apply_move(session: Session, move: Move) -> bool:
    """Apply a planned move to a job that is not loaded; False when the job is no longer in move.current.
    Pending rows are not flushed first (they are job events, which this UPDATE does not read), so the
    events of a claim and of its `running` go out in one INSERT."""
    result = session.execute(
        update(Job).where(*move.where).values(**move.values),
        execution_options={"synchronize_session": "fetch", "autoflush": False},
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    session.add(move.event())
    return True


def set_process(
    session: Session, job_id: uuid.UUID, *, pid: int, pgid: int, create_time: float | None
) -> bool:
    """Record the job's process (whatever its state); False if there is no such job."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(pid=pid, pgid=pgid, proc_create_time=create_time, proc_reaped=False),
        execution_options={"synchronize_session": "fetch"},
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def orphan_candidates(session: Session, host: str) -> list[Job]:
    """Jobs of this host whose process group eyas recorded and has not yet confirmed gone."""
    query = select(Job).where(Job.host == host, Job.pgid.is_not(None), Job.proc_reaped.is_(False))
    return list(session.scalars(query))


def idempotency_get(session: Session, principal: str, key: str) -> IdempotencyKey | None:
    return session.get(IdempotencyKey, (principal, key))


def idempotency_add(session: Session, principal: str, key: str, body_hash: str, job_id: uuid.UUID) -> None:
    session.add(IdempotencyKey(principal=principal, key=key, body_hash=body_hash, job_id=job_id))


def add_metrics(session: Session, job_id: uuid.UUID, rows: Sequence[tuple[str, int, float]]) -> None:
    session.add_all(JobMetric(job_id=job_id, name=n, step=s, value=v) for n, s, v in rows)


def metrics(
    session: Session, job_id: uuid.UUID, *, name: str | None, since_step: int | None, limit: int
) -> list[JobMetric]:
    query = select(JobMetric).where(JobMetric.job_id == job_id)
    if name:
        query = query.where(JobMetric.name == name)
    if since_step is not None:
        query = query.where(JobMetric.step > since_step)
    return list(session.scalars(query.order_by(JobMetric.step, JobMetric.id).limit(limit)))
