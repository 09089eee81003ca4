"""Job states and the one function that changes them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, bindparam, insert, inspect, select, update
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.sql.schema import ScalarElementColumnDefault

from app.core.errors import AppError, ErrorCode
from app.models.base import utcnow
from app.models.job import Job, JobEvent


class JobState(StrEnum):
    PENDING = "pending"
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class EventReason(StrEnum):
    """Why a job changed state without ending (an ending's reason is a contract.reasons.TerminationReason)."""

    SUBMITTED = "SUBMITTED"
    REQUEUED = "REQUEUED"


INITIAL = frozenset({JobState.PENDING, JobState.QUEUED})  # a new job waits on dependencies, or is queued
TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
ACTIVE = frozenset({JobState.STARTING, JobState.RUNNING, JobState.CANCELLING})

ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.QUEUED, JobState.CANCELLED, JobState.FAILED}),
    JobState.QUEUED: frozenset({JobState.STARTING, JobState.CANCELLED, JobState.FAILED}),
    # starting -> queued: GPUs busy, or the worker was lost and attempts remain.
    JobState.STARTING: frozenset(
        {JobState.RUNNING, JobState.QUEUED, JobState.CANCELLING, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLING, JobState.QUEUED}),
    JobState.CANCELLING: frozenset({JobState.CANCELLED, JobState.FAILED, JobState.SUCCEEDED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

_TIMESTAMP_ON_ENTRY = {
    JobState.QUEUED: "queued_at",
    JobState.STARTING: "started_at",
    JobState.RUNNING: "running_at",
}


def can_transition(current: str, target: JobState) -> bool:
    return target in ALLOWED[JobState(current)]


class TransitionConflict(AppError):
    """The job changed state under us (another worker, a cancel, the reaper)."""


@dataclass(frozen=True)
class Move:
    """One legal move of a job, planned as a compare-and-set: `where` matches the job only while it is still
    in `current`, `values` is what the UPDATE sets (Python values, or SQL expressions on the row when the job
    was not loaded), `event()` the row that records it."""

    job_id: uuid.UUID
    current: JobState
    target: JobState
    values: dict[str, Any]
    reason: str | None = None
    message: str | None = None

    @property
    def where(self) -> tuple[ColumnElement[bool], ...]:
        return (Job.id == self.job_id, Job.state == self.current.value)

    def event(self) -> JobEvent:
        return JobEvent(
            job_id=self.job_id,
            from_state=self.current.value,
            to_state=self.target.value,
            reason=self.reason,
            message=self.message,
            at=self.values["updated_at"],
        )


def plan(
    job_id: uuid.UUID,
    current: str,
    target: JobState,
    *,
    reason: str | None = None,
    message: str | None = None,
    extra: dict[str, Any] | None = None,
    loaded: Job | None = None,
) -> Move:
    """The one place that knows legal moves: current → target, or 409 INVALID_TRANSITION. `loaded` is the
    job as read (its version and termination reason are then known); without it, they are read by the
    UPDATE itself (`version + 1`), so a worker can claim a job in one statement without reading it first."""
    state = JobState(current)
    if target not in ALLOWED[state]:
        raise AppError(
            ErrorCode.INVALID_TRANSITION,
            f"job {job_id} is {state.value}; it cannot become {target.value}",
            state=state.value,
        )
    now = utcnow()
    version: Any = (loaded.version or 0) + 1 if loaded is not None else Job.version + 1
    values: dict[str, Any] = {"state": target.value, "updated_at": now, "version": version}
    if target in TERMINAL:
        values["finished_at"] = now
        values["termination_reason"] = reason or (
            loaded.termination_reason if loaded is not None else Job.termination_reason
        )
        if message is not None:
            values["message"] = message
    elif (field := _TIMESTAMP_ON_ENTRY.get(target)) is not None:
        values[field] = now
    values.update(extra or {})
    return Move(job_id, state, target, values, reason, message)


def transition(
    session: Session,
    job: Job,
    target: JobState,
    *,
    reason: str | None = None,
    message: str | None = None,
    extra: dict[str, Any] | None = None,
) -> JobEvent:
    """Move a loaded job to `target` and record the event.

    The move is a compare-and-set (`UPDATE … WHERE state = <current>`, planned by `plan`), so two actors
    racing on one job (a duplicate delivery, a cancel against a finish, the reaper) cannot both win. An
    illegal move raises 409 INVALID_TRANSITION; a lost race raises TransitionConflict (also a 409). A job not
    loaded is moved by its repository with the same plan (app/jobs/repository.py `move`, `claim`).
    """
    if job.state is None:
        return _enter(session, job, target, reason=reason, extra=extra or {})
    move = plan(job.id, job.state, target, reason=reason, message=message, extra=extra, loaded=job)
    result = session.execute(
        update(Job).where(*move.where).values(**move.values).execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise TransitionConflict(
            ErrorCode.INVALID_TRANSITION, f"job {job.id} changed state concurrently", state=move.current.value
        )
    for key, value in move.values.items():
        set_committed_value(job, key, value)
    event = move.event()
    session.add(event)
    session.flush()
    return event


def _enter(
    session: Session, job: Job, target: JobState, *, reason: str | None, extra: dict[str, Any]
) -> JobEvent:
    """A new job's first state: the row is inserted in it, and its first event recorded. On PostgreSQL both go
    in one statement (`WITH event AS (INSERT INTO job_event …) INSERT INTO job …`: the event's foreign key is
    checked at the statement's end), and the object becomes the session's as if it had been flushed."""
    if target not in INITIAL:
        raise AppError(ErrorCode.INVALID_TRANSITION, f"a new job cannot start {target.value}")
    job.state = target.value
    if (field := _TIMESTAMP_ON_ENTRY.get(target)) is not None:
        setattr(job, field, job.updated_at)
    for key, value in extra.items():
        setattr(job, key, value)
    event = JobEvent(job_id=job.id, from_state=None, to_state=target.value, reason=reason)
    if session.get_bind().dialect.name != "postgresql":
        session.add(job)
        session.flush()
        session.add(event)
        return event
    row = _column_values(job)
    event.at = utcnow()
    first_event = {
        "event_job_id": job.id,
        "event_to": event.to_state,
        "event_reason": reason,
        "event_at": event.at,
    }
    session.connection().execute(_NEW_JOB, row | first_event)
    for attr in inspect(Job).column_attrs:  # a column left out of the INSERT is NULL
        set_committed_value(job, attr.key, row.get(attr.key))
    make_transient_to_detached(job)
    session.add(job)
    return event


# The row's columns are the parameters' names that are job columns; the event's are named apart, and it is an
# INSERT … SELECT, whose columns are fixed (SQLAlchemy adds a parameter named like a column, `id`, to the
# columns of an INSERT … VALUES, nested ones included).
_FIRST_EVENT = select(
    bindparam("event_job_id", type_=JobEvent.job_id.type),
    bindparam("event_to", type_=JobEvent.to_state.type),
    bindparam("event_reason", type_=JobEvent.reason.type),
    bindparam("event_at", type_=JobEvent.at.type),
)
_NEW_JOB = insert(Job).add_cte(
    insert(JobEvent).from_select(["job_id", "to_state", "reason", "at"], _FIRST_EVENT).cte("event")
)


def _column_values(job: Job) -> dict[str, Any]:
    """The columns of a new job as the ORM would insert them: those set, and the constant defaults of those
    not set (the others are left out: NULL, not JSON null). Its id and times (computed defaults) are set."""
    values: dict[str, Any] = {}
    for attr in inspect(Job).column_attrs:
        default = attr.columns[0].default
        if attr.key in job.__dict__:
            values[attr.key] = job.__dict__[attr.key]
        elif isinstance(default, ScalarElementColumnDefault):
            values[attr.key] = default.arg
        elif default is not None:
            raise TypeError(f"a new job must have job.{attr.key} set (its default is computed)")
    return values
