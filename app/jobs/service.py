"""Jobs as the API sees them: submit (validated, idempotent), read, list, cancel. Services never commit."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.errors import AppError, ErrorCode, found_or_404
from app.core.paging import decode_cursor, page_of
from app.core.queue import enqueue_after_commit
from app.core.security import Principal
from app.hosts import service as hosts_service
from app.jobs import path_rules, refs, repository
from app.jobs.params import validate_params
from app.jobs.schemas import JobCreate
from app.jobs.states import TERMINAL, EventReason, JobState, transition
from app.models.base import utcnow
from app.models.job import Job, JobEvent, JobMetric
from contract.params.common import StageParams
from contract.reasons import TerminationReason


def submit_job(
    session: Session,
    settings: Settings,
    *,
    spec: JobCreate,
    principal: Principal,
    idempotency_key: str | None = None,
    pipeline_id: uuid.UUID | None = None,
    pipeline_step: str | None = None,
    param_refs: dict[str, dict[str, str]] | None = None,
    hand_over: Callable[[], None] | None = None,
) -> tuple[Job, bool]:
    """Create a job (or return the one an idempotency key already made). Returns (job, created).

    A pipeline's step names its place (`pipeline_step`) and the params it reads from earlier steps'
    artifacts (`param_refs`, filled when it is queued: now, if its dependencies already succeeded).
    `hand_over`, when the router passes its commit, ends the request's transaction as soon as the job is
    made: the job's message is sent after that commit (enqueue_after_commit)."""
    body_hash = request_hash(spec)
    if idempotency_key is not None:
        existing = replayed_job(session, principal, idempotency_key, body_hash)
        if existing is not None:
            return existing, False
    params = validate_params(spec.kind, spec.params)
    gpus = spec.gpus if spec.gpus is not None else params.gpus_needed()
    conflict = params.gpus_conflict(gpus)
    if conflict is not None:
        raise AppError(ErrorCode.INVALID_PARAMS, conflict, errors=[{"field": "gpus", "message": conflict}])
    if spec.gpus is None and gpus and params.gpus_optional():
        gpus = hosts_service.gpus_if_present(session, host=spec.host, wanted=gpus)
    host = hosts_service.place(session, settings, gpus=gpus, host=spec.host)
    path_rules.check_job_paths(session, settings, host, params)
    deps = _checked_dependencies(session, spec.depends_on)
    job = _new_job(spec, params, host=host, gpus=gpus, principal=principal, pipeline_id=pipeline_id)
    job.pipeline_step, job.param_refs = pipeline_step, param_refs or None
    if all(d.state == JobState.SUCCEEDED for d in deps):
        transition(
            session,
            job,
            JobState.QUEUED,
            reason=EventReason.SUBMITTED,
            extra={"dispatched_at": utcnow(), "dispatch_count": 1},
        )
    else:
        transition(session, job, JobState.PENDING, reason=EventReason.SUBMITTED)
    repository.add_dependencies(session, job.id, [d.id for d in deps])
    if idempotency_key is not None:
        remember_key(session, principal, idempotency_key, body_hash, job)
    if job.state == JobState.QUEUED:
        if job.param_refs:
            _fill_refs_now(session, job)
        enqueue_after_commit(session, settings, str(job.id), host)
    if hand_over is not None:
        hand_over()
    return job, True


def _fill_refs_now(session: Session, job: Job) -> None:
    """Its dependencies already succeeded (a pipeline's retry): read their artifacts now."""
    try:
        refs.fill(session, job)
    except refs.MissingArtifact as exc:
        raise AppError(ErrorCode.UNKNOWN_DEPENDENCY, f"cannot retry: {exc}") from None


def find_job(session: Session, job_id: uuid.UUID) -> Job | None:
    return repository.get(session, job_id)


def get_job(session: Session, job_id: uuid.UUID) -> Job:
    return found_or_404(find_job(session, job_id), f"no job {job_id}")


def list_jobs(
    session: Session,
    *,
    kind: str | None,
    state: str | None,
    host: str | None,
    pipeline_id: uuid.UUID | None,
    cursor: str | None,
    limit: int,
    include_dry_runs: bool = False,
) -> tuple[list[Job], str | None]:
    rows = repository.page(
        session,
        kind=kind,
        state=state,
        host=host,
        pipeline_id=pipeline_id,
        after=decode_cursor(cursor),
        limit=limit + 1,
        include_dry_runs=include_dry_runs,
    )
    return page_of(rows, limit, lambda job: (job.created_at, job.id))


def request_cancel(
    session: Session, *, job_id: uuid.UUID, reason: TerminationReason = TerminationReason.USER_CANCELLED
) -> Job:
    """Queued and pending jobs end at once; active ones go to `cancelling` and their worker ends them."""
    job = get_job(session, job_id)
    state = JobState(job.state)
    if state in TERMINAL:
        raise AppError(
            ErrorCode.INVALID_TRANSITION, f"job {job_id} already ended ({state.value})", state=state.value
        )
    if state in (JobState.PENDING, JobState.QUEUED):
        transition(session, job, JobState.CANCELLED, reason=reason, message="cancelled before it started")
        return job
    if state != JobState.CANCELLING:
        transition(session, job, JobState.CANCELLING, reason=reason, extra={"cancel_requested_at": utcnow()})
    return job


def job_metrics(
    session: Session, job_id: uuid.UUID, *, name: str | None, since_step: int | None, limit: int
) -> list[JobMetric]:
    """The metrics a job reported, by step (404 for an unknown job)."""
    get_job(session, job_id)
    return repository.metrics(session, job_id, name=name, since_step=since_step, limit=limit)


def job_events(session: Session, job_id: uuid.UUID) -> list[JobEvent]:
    get_job(session, job_id)
    return repository.events(session, job_id)


def request_hash(spec: BaseModel) -> str:
    """A digest of the request body, to tell an Idempotency-Key's replay from a different request."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def replayed_job(session: Session, principal: Principal, key: str, body_hash: str) -> Job | None:
    """The job an Idempotency-Key already made (same body), None if new; a different body is a 422."""
    known = repository.idempotency_get(session, principal.token_id, key)
    if known is None:
        return None
    if known.body_hash != body_hash:
        raise AppError(
            ErrorCode.IDEMPOTENCY_MISMATCH, "this Idempotency-Key was used with a different request body"
        )
    return get_job(session, known.job_id)


def remember_key(session: Session, principal: Principal, key: str, body_hash: str, job: Job) -> None:
    """Bind the key to the job in this transaction; a concurrent request with the same key gets a 409."""
    try:
        with session.begin_nested():
            repository.idempotency_add(session, principal.token_id, key, body_hash, job.id)
    except IntegrityError:
        raise AppError(
            ErrorCode.IDEMPOTENCY_IN_FLIGHT, "a request with this Idempotency-Key is in flight; retry shortly"
        ) from None


def _checked_dependencies(session: Session, depends_on: list[uuid.UUID]) -> list[Job]:
    """The dependencies, held until the new job is stored: a dependency that ends meanwhile waits for the
    commit and then finds the new job among its dependents (read first, it would queue none of them, and
    a job judged pending on a state read before that end would wait forever)."""
    repository.hold(session, depends_on)
    deps = repository.get_many(session, depends_on)
    missing = set(depends_on) - {d.id for d in deps}
    if missing:
        raise AppError(
            ErrorCode.UNKNOWN_DEPENDENCY, f"depends_on names unknown job(s): {sorted(map(str, missing))}"
        )
    dead = [d for d in deps if d.state in (JobState.FAILED, JobState.CANCELLED)]
    if dead:
        raise AppError(
            ErrorCode.UNKNOWN_DEPENDENCY,
            f"dependency {dead[0].id} already ended {dead[0].state}; it cannot succeed",
        )
    return deps


def _new_job(
    spec: JobCreate,
    params: StageParams,
    *,
    host: str,
    gpus: int,
    principal: Principal,
    pipeline_id: uuid.UUID | None,
) -> Job:
    return Job(
        id=uuid.uuid4(),
        kind=spec.kind,
        params=params.model_dump(mode="json"),
        host=host,
        gpus_requested=gpus,
        max_attempts=spec.max_attempts,
        attempt=0,
        timeout_s=spec.timeout_s,
        pipeline_id=pipeline_id,
        created_by=principal.token_id,
        created_at=utcnow(),
        updated_at=utcnow(),
        version=1,
        dispatch_count=0,
        log_seq=0,
        proc_reaped=False,
    )
