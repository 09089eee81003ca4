"""Pipelines: create the chain of jobs, read its state, cancel it, retry from the failed step.
Services never commit."""

from __future__ import annotations

import uuid

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.errors import AppError, ErrorCode, field_errors, found_or_404
from app.core.paging import decode_cursor, page_of
from app.core.security import Principal
from app.jobs import refs
from app.jobs import service as jobs
from app.jobs.schemas import JobCreate, JobRead
from app.jobs.states import ACTIVE, TERMINAL, JobState
from app.models.base import utcnow
from app.models.job import Job
from app.models.pipeline import Pipeline
from app.pipelines import repository
from app.pipelines.acceptance import acceptance_report
from app.pipelines.schemas import (
    SECTION_STEPS,
    Eagle3PipelineCreate,
    PipelinePage,
    PipelineRead,
    PipelineRetry,
)
from app.pipelines.templates import EAGLE3_STEPS, StepPlan, eagle3_plan

_ENDED_BADLY = (JobState.FAILED, JobState.CANCELLED)


def create_pipeline(
    session: Session,
    settings: Settings,
    *,
    spec: Eagle3PipelineCreate,
    principal: Principal,
    idempotency_key: str | None = None,
) -> tuple[PipelineRead, bool]:
    """Validate every step now (a bad param is a 422 before anything runs), then submit the chain.

    Returns (pipeline, created); a replayed Idempotency-Key returns the pipeline it made."""
    key = f"pipeline:{idempotency_key}" if idempotency_key else None
    body_hash = jobs.request_hash(spec)
    if key is not None:
        first = jobs.replayed_job(session, principal, key, body_hash)
        if first is not None and first.pipeline_id is not None:
            return read(session, get_pipeline(session, first.pipeline_id)), False
    pipeline = Pipeline(
        id=uuid.uuid4(),
        template=spec.template,
        spec=spec.model_dump(mode="json"),
        host=spec.host,
        created_by=principal.token_id,
        created_at=utcnow(),
        retries=0,
    )
    plans = _plans(pipeline)  # each step's params are validated as it is submitted; a bad one undoes all
    repository.add(session, pipeline)
    session.flush()
    made = _submit_steps(session, settings, pipeline, plans, done={}, principal=principal)
    if key is not None:
        jobs.remember_key(session, principal, key, body_hash, made[0])
    return read(session, pipeline), True


def get_pipeline(session: Session, pipeline_id: uuid.UUID) -> Pipeline:
    return found_or_404(repository.get(session, pipeline_id), f"no pipeline {pipeline_id}")


def _shown_root(pipeline: Pipeline) -> str | None:
    """The run folder as a read shows it; None for a stored spec without a workdir (a read never fails)."""
    workdir = pipeline.spec.get("workdir") if isinstance(pipeline.spec, dict) else None
    return _root(pipeline, workdir) if isinstance(workdir, str) else pipeline.run_root


def read(session: Session, pipeline: Pipeline) -> PipelineRead:
    """The pipeline as the API shows it: its steps' latest jobs, its state, the first step that failed."""
    latest = latest_jobs(session, pipeline)
    state, failed_step = state_of(latest)
    return PipelineRead(
        id=pipeline.id,
        template=pipeline.template,
        state=state,
        host=pipeline.host,
        created_at=pipeline.created_at,
        retries=pipeline.retries,
        spec=pipeline.spec,
        run_root=_shown_root(pipeline),
        failed_step=failed_step,
        jobs=[JobRead.of(j) for j in latest.values()],
        acceptance=acceptance_report(
            {step: job.result for step, job in latest.items()},
            {step: job.params for step, job in latest.items()},
        ),
    )


def read_pipeline(session: Session, pipeline_id: uuid.UUID) -> PipelineRead:
    """One pipeline as the API shows it (404 if unknown)."""
    return read(session, get_pipeline(session, pipeline_id))


def list_pipelines(session: Session, *, cursor: str | None, limit: int) -> PipelinePage:
    """Pipelines, newest first, as the API shows them, a page at a time."""
    rows = repository.page(session, after=decode_cursor(cursor), limit=limit + 1)
    shown, next_cursor = page_of(rows, limit, lambda p: (p.created_at, p.id))
    return PipelinePage(items=[read(session, p) for p in shown], next_cursor=next_cursor)


def latest_jobs(session: Session, pipeline: Pipeline) -> dict[str, Job]:
    """The newest job of each step (a retry adds newer ones)."""
    latest: dict[str, Job] = {}
    for job in repository.jobs_of(session, pipeline.id):
        if job.pipeline_step is not None:
            latest[job.pipeline_step] = job
    return latest


def state_of(latest: dict[str, Job]) -> tuple[str, str | None]:
    """(pipeline state, the first step that failed or was cancelled)."""
    ordered = [latest[s] for s in EAGLE3_STEPS if s in latest]
    if any(j.state == JobState.CANCELLING for j in ordered):
        return "cancelling", None
    bad = next((j for j in ordered if j.state in _ENDED_BADLY), None)
    if bad is not None and any(j.state in ACTIVE for j in ordered):
        return "failing", bad.pipeline_step  # a step failed; the ones still running are being ended
    if bad is not None:
        return ("failed" if bad.state == JobState.FAILED else "cancelled"), bad.pipeline_step
    if ordered and all(j.state == JobState.SUCCEEDED for j in ordered):
        return "succeeded", None
    if any(j.state in ACTIVE for j in ordered):
        return "running", None
    return "queued", None


def cancel_pipeline(session: Session, *, pipeline_id: uuid.UUID) -> PipelineRead:
    """Cancel what is running and what waits; finished steps stay as they are. A pipeline whose every step
    already ended has nothing to cancel: 409, as for a job that ended."""
    pipeline = get_pipeline(session, pipeline_id)
    latest = latest_jobs(session, pipeline)
    if all(job.state in TERMINAL for job in latest.values()):
        state, _ = state_of(latest)
        raise AppError(
            ErrorCode.INVALID_TRANSITION, f"pipeline {pipeline_id} already ended ({state})", state=state
        )
    for job in latest.values():
        if job.state not in TERMINAL and job.state != JobState.CANCELLING:
            jobs.request_cancel(session, job_id=job.id)
    return read(session, pipeline)


def retry_pipeline(
    session: Session,
    settings: Settings,
    *,
    pipeline_id: uuid.UUID,
    principal: Principal,
    retry: PipelineRetry | None = None,
) -> PipelineRead:
    """Run again from the failed step, or from `retry.from_step`, with `retry.params` merged into the spec;
    the steps before keep their artifacts. Everything is checked before anything changes: a refused retry
    leaves the pipeline as it was."""
    retry = retry or PipelineRetry()
    pipeline = get_pipeline(session, pipeline_id)
    latest = latest_jobs(session, pipeline)
    state, failed_step = state_of(latest)
    if any(job.state not in TERMINAL for job in latest.values()):
        raise AppError(
            ErrorCode.INVALID_TRANSITION, f"pipeline {pipeline_id} is {state}: retry it once it ended"
        )
    start = retry.from_step or failed_step
    if start is None:
        raise AppError(
            ErrorCode.INVALID_TRANSITION,
            f"pipeline {pipeline_id} is {state}; nothing to retry (name from_step to run steps again)",
        )
    spec = _merged_spec(pipeline, retry)
    fresh = f"{spec.workdir.rstrip('/')}/{pipeline.id}/retry-{pipeline.retries + 1}"
    root = fresh if retry.params else _root(pipeline, spec.workdir)
    plans = eagle3_plan(spec, root)
    first = _first_rerun(plans, start, failed_step, retry, _changed_steps(pipeline, spec))
    done = {p.step: latest[p.step] for p in plans[:first]}
    pipeline.retries += 1
    if retry.params:
        pipeline.spec, pipeline.run_root = spec.model_dump(mode="json"), root
    _submit_steps(session, settings, pipeline, plans[first:], done=done, principal=principal)
    return read(session, pipeline)


def _merged_spec(pipeline: Pipeline, retry: PipelineRetry) -> Eagle3PipelineCreate:
    """The stored spec with the retry's sections merged in, validated as a new pipeline's would be."""
    merged = dict(pipeline.spec)
    for section, changes in retry.params.items():
        merged[section] = {**(merged.get(section) or {}), **changes}
    try:
        return Eagle3PipelineCreate.model_validate(merged)
    except ValidationError as exc:
        errors = field_errors(exc.errors())
        first = errors[0]
        where = f"{first['field']}: " if first["field"] else ""
        raise AppError(
            ErrorCode.VALIDATION_FAILED,
            f"the retried spec is invalid: {where}{first['message']}",
            errors=errors,
        ) from None


def _changed_steps(pipeline: Pipeline, spec: Eagle3PipelineCreate) -> set[str] | None:
    """The steps whose params the retried spec changes, planned in one folder so only the spec differs (a
    sweep's gate threshold leaves serve_held_out as it was); None when the stored spec cannot be planned."""
    root = _root(pipeline, spec.workdir)
    try:
        before = {p.step: p.params for p in _plans(pipeline)}
    except ValidationError:
        return None
    return {p.step for p in eagle3_plan(spec, root) if before.get(p.step) != p.params}


def _first_rerun(
    plans: list[StepPlan],
    start: str,
    failed_step: str | None,
    retry: PipelineRetry,
    changed: set[str] | None,
) -> int:
    """The index of the first step to run again, after checking the retry can be honoured: the step exists,
    no failed step is skipped, and every step whose params change runs again (`changed`; when unknown, every
    step a changed section feeds)."""
    steps = [p.step for p in plans]
    if start not in steps:
        raise AppError(
            ErrorCode.VALIDATION_FAILED,
            f"from_step {start!r} is not a step of this pipeline ({', '.join(steps)})",
        )
    first = steps.index(start)
    if failed_step is not None and failed_step in steps and steps.index(failed_step) < first:
        raise AppError(
            ErrorCode.VALIDATION_FAILED,
            f"the pipeline failed at {failed_step}: run again from there or an earlier step, not {start}",
        )
    if changed is None:
        kept = [step for section in retry.params for step in SECTION_STEPS[section] if step in steps[:first]]
    else:
        kept = [step for step in steps[:first] if step in changed]
    if kept:
        section = next((s for s in retry.params if kept[0] in SECTION_STEPS[s]), next(iter(retry.params)))
        raise AppError(
            ErrorCode.VALIDATION_FAILED,
            f"params.{section} changes {kept[0]}, which this retry does not run again: "
            f"set from_step to {kept[0]} or earlier",
        )
    for section in retry.params:
        if not any(step in steps for step in SECTION_STEPS[section]):
            raise AppError(
                ErrorCode.VALIDATION_FAILED, f"params.{section}: this pipeline has no {section} step"
            )
    return first


def _root(pipeline: Pipeline, workdir: str) -> str:
    """Where the steps write: <workdir>/<id>, or the folder of the last retry that changed params."""
    return pipeline.run_root or f"{workdir.rstrip('/')}/{pipeline.id}"


def _plans(pipeline: Pipeline) -> list[StepPlan]:
    spec = Eagle3PipelineCreate.model_validate(pipeline.spec)
    return eagle3_plan(spec, _root(pipeline, spec.workdir))


def _submit_steps(
    session: Session,
    settings: Settings,
    pipeline: Pipeline,
    plans: list[StepPlan],
    *,
    done: dict[str, Job],
    principal: Principal,
) -> list[Job]:
    """Submit each step depending on the one before; every step runs on the host of the first."""
    made = dict(done)
    previous = list(done.values())[-1] if done else None
    host = pipeline.host or (previous.host if previous is not None else None)
    for plan in plans:
        spec = JobCreate(
            kind=plan.kind,
            params=plan.params,
            host=host,
            depends_on=[previous.id] if previous is not None else [],
        )
        job, _ = jobs.submit_job(
            session,
            settings,
            spec=spec,
            principal=principal,
            pipeline_id=pipeline.id,
            pipeline_step=plan.step,
            param_refs={param: refs.ref(made[step].id, kind) for param, (step, kind) in plan.refs.items()},
        )
        host = host or job.host
        made[plan.step] = previous = job
    session.flush()
    return [made[p.step] for p in plans]
