"""All SQL about jobs, their events, dependencies, idempotency keys and metrics."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    ClauseElement,
    ColumnElement,
    Row,
    Select,
    and_,
    bindparam,
    false,
    func,
    insert,
    literal,
    not_,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from app.core.paging import After, newest_first
from app.jobs.states import ACTIVE, TERMINAL, JobState, Move, plan
from app.models.base import utcnow
from app.models.job import IdempotencyKey, Job, JobDependency, JobEvent, JobMetric


def get(session: Session, job_id: uuid.UUID) -> Job | None:
    return session.get(Job, job_id)


def hold(session: Session, job_ids: Sequence[uuid.UUID]) -> None:
    """Hold these jobs' rows until the transaction ends (a no-op UPDATE: row locks in PostgreSQL, the write
    lock in SQLite): a transaction that ends one of them waits, and then sees what this one stored."""
    if job_ids:
        session.execute(update(Job).where(Job.id.in_(job_ids)).values(id=Job.id))


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
    after: After | None,
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
    return list(session.scalars(newest_first(query, Job.created_at, Job.id, after=after, limit=limit)))


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
    created_at: datetime


def claim(session: Session, job_id: uuid.UUID, *, host: str, worker: str) -> ClaimRow | None:
    """queued → starting, with the first heartbeat (database clock), in one statement on PostgreSQL (see
    _move: no read first, the event in the same statement); None when it matched nothing (a duplicate
    delivery, a cancelled job, another host's). A second claimer racing this one waits on the row lock, then
    finds the job no longer queued."""
    move = plan(
        job_id,
        JobState.QUEUED,
        JobState.STARTING,
        extra={"worker": worker, "attempt": Job.attempt + 1, "heartbeat_at": _db_now(session)},
    )
    row = _move(session, move, _CLAIMED, host=host)
    return ClaimRow._make(row) if row is not None else None


_CLAIMED = ("kind", "params", "gpus_requested", "timeout_s", "attempt", "log_seq", "created_at")


def apply_move(session: Session, move: Move) -> bool:
    """Apply a planned move to a job that is not loaded, with its event; False when the job is no longer in
    move.current."""
    return _move(session, move, ("id",)) is not None


def _move(session: Session, move: Move, returning: tuple[str, ...], **where: Any) -> Row[Any] | None:
    """`UPDATE job … WHERE <move.where> AND <column = value for where> RETURNING <returning>` and the move's
    event. On PostgreSQL one statement, the event inserted from what the UPDATE returned (`WITH moved AS
    (UPDATE …), event AS (INSERT … SELECT … FROM moved) SELECT … FROM moved`): one round trip, atomic even
    outside a transaction (autocommit_scope), and no event when nothing moved; the statement is built once
    per shape of move (_move_statement). On SQLite (no DML in WITH) the event is added to the session and
    goes out with its next flush; pending rows are not flushed first (job events, which the UPDATE does not
    read)."""
    table = Job.__table__.c
    if session.get_bind().dialect.name != "postgresql":
        matches = [table[name] == value for name, value in where.items()]
        changed = update(Job).where(*move.where, *matches).values(**move.values)
        options = {"synchronize_session": "fetch", "autoflush": False}
        row = session.execute(changed.returning(*(table[c] for c in returning)), execution_options=options)
        found = row.one_or_none()
        if found is not None:
            session.add(move.event())
        return found
    values = {key: value for key, value in move.values.items() if not isinstance(value, ClauseElement)}
    query = _move_statement(_shape(move), returning, tuple(where))
    params = {f"set_{key}": value for key, value in values.items()}
    params |= {f"where_{name}": value for name, value in where.items()}
    params |= {"job_id": move.job_id, "event_reason": move.reason, "event_message": move.message}
    params["event_at"] = values["updated_at"]
    return session.connection().execute(query, params).one_or_none()


_MoveShape = tuple[JobState, JobState, tuple[tuple[str, Any], ...]]
_statements: dict[tuple[_MoveShape, tuple[str, ...], tuple[str, ...]], Select[Any]] = {}
_expressions: dict[Any, ClauseElement] = {}


def _shape(move: Move) -> _MoveShape:
    """What a move's statement depends on: its states and the values it sets, Python values as parameters,
    SQL expressions (`attempt + 1`, the database's clock) by their structure and their bound values."""
    columns: list[tuple[str, Any]] = []
    for key, value in move.values.items():
        if not isinstance(value, ClauseElement):
            columns.append((key, None))
            continue
        cache_key = value._generate_cache_key()
        assert cache_key is not None, f"{key}: an expression SQLAlchemy cannot cache"
        identity = (cache_key.key, tuple(b.effective_value for b in cache_key.bindparams))
        _expressions.setdefault(identity, value)
        columns.append((key, identity))
    return move.current, move.target, tuple(columns)


def _move_statement(shape: _MoveShape, returning: tuple[str, ...], where: tuple[str, ...]) -> Select[Any]:
    statement = _statements.get((shape, returning, where))
    if statement is not None:
        return statement
    current, target, columns = shape
    table, events = Job.__table__.c, JobEvent.__table__.c
    values = {
        key: bindparam(f"set_{key}", type_=table[key].type) if identity is None else _expressions[identity]
        for key, identity in columns
    }
    moved = (
        update(Job)
        .where(table.id == bindparam("job_id", type_=table.id.type), table.state == current.value)
        .where(*(table[name] == bindparam(f"where_{name}", type_=table[name].type) for name in where))
        .values(**values)
        .returning(*(table[c] for c in returning))
        .cte("moved")
    )
    event = insert(JobEvent).from_select(
        ["job_id", "from_state", "to_state", "reason", "message", "at"],
        select(
            bindparam("job_id", type_=events.job_id.type),
            literal(current.value, events.from_state.type),
            literal(target.value, events.to_state.type),
            bindparam("event_reason", type_=events.reason.type),  # not a job column's name: SQLAlchemy
            bindparam("event_message", type_=events.message.type),  # would add it to the UPDATE's SET
            bindparam("event_at", type_=events.at.type),
        ).select_from(moved),
    )
    statement = select(*(moved.c[c] for c in returning)).add_cte(event.cte("event"))
    _statements[(shape, returning, where)] = statement
    return statement


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


def unfinished_params(session: Session, host: str) -> list[tuple[uuid.UUID, str, dict[str, Any]]]:
    """(id, kind, params) of every job on `host` that has not ended: the paths it reads or writes are in
    use now or will be (pending and queued jobs included)."""
    query = select(Job.id, Job.kind, Job.params).where(
        Job.host == host, Job.state.not_in([s.value for s in TERMINAL])
    )
    return [(row[0], row[1], row[2]) for row in session.execute(query)]
