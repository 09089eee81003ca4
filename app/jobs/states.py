"""Job states and the one function that changes them."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

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


def transition(
    session: Session,
    job: Job,
    target: JobState,
    *,
    reason: str | None = None,
    message: str | None = None,
    extra: dict[str, Any] | None = None,
) -> JobEvent:
    """Move a job to `target` and record the event.

    The move is a compare-and-set (`UPDATE … WHERE state = <current>`), so two actors racing on one job
    (a duplicate delivery, a cancel against a finish, the reaper) cannot both win. An illegal move raises
    409 INVALID_TRANSITION; a lost race raises TransitionConflict (also a 409).
    """
    if job.state is None:
        return _enter(session, job, target, reason=reason, extra=extra or {})
    current = JobState(job.state)
    if target not in ALLOWED[current]:
        raise AppError(
            ErrorCode.INVALID_TRANSITION,
            f"job {job.id} is {current.value}; it cannot become {target.value}",
            state=current.value,
        )
    values = _values_for(job, target, reason, message, extra or {})
    result = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.state == current.value)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise TransitionConflict(
            ErrorCode.INVALID_TRANSITION, f"job {job.id} changed state concurrently", state=current.value
        )
    for key, value in values.items():
        set_committed_value(job, key, value)
    event = JobEvent(
        job_id=job.id,
        from_state=current.value,
        to_state=target.value,
        reason=reason,
        message=message,
        at=values["updated_at"],
    )
    session.add(event)
    session.flush()
    return event


def _enter(
    session: Session, job: Job, target: JobState, *, reason: str | None, extra: dict[str, Any]
) -> JobEvent:
    """A new job's first state: the row is inserted in it, and its first event recorded."""
    if target not in INITIAL:
        raise AppError(ErrorCode.INVALID_TRANSITION, f"a new job cannot start {target.value}")
    job.state = target.value
    if (field := _TIMESTAMP_ON_ENTRY.get(target)) is not None:
        setattr(job, field, job.updated_at)
    for key, value in extra.items():
        setattr(job, key, value)
    session.add(job)
    session.flush()
    event = JobEvent(job_id=job.id, from_state=None, to_state=target.value, reason=reason)
    session.add(event)
    return event


def _values_for(
    job: Job, target: JobState, reason: str | None, message: str | None, extra: dict[str, Any]
) -> dict[str, Any]:
    now = utcnow()
    values: dict[str, Any] = {"state": target.value, "updated_at": now, "version": (job.version or 0) + 1}
    if target in TERMINAL:
        values["finished_at"] = now
        values["termination_reason"] = reason or job.termination_reason
        if message is not None:
            values["message"] = message
    elif (field := _TIMESTAMP_ON_ENTRY.get(target)) is not None:
        values[field] = now
    values.update(extra)
    return values
