"""/v1/jobs: submit, read, list, cancel, wait, events, metrics. Thin: parse, one service call, return."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from app.core.deps import IdempotencyKey, SessionDep, SettingsDep, created_or_replayed
from app.core.paging import PageCursor
from app.hosts.schemas import HOST_NAME_PATTERN
from app.jobs import service
from app.jobs.schemas import JobCreate, JobEventRead, JobPage, JobRead, MetricRead
from app.jobs.states import JobState
from app.jobs.waiting import wait_terminal
from app.tokens.deps import ReadPrincipal, SubmitPrincipal

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
MAX_WAIT_S = 600.0


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobRead,
    responses={200: {"model": JobRead, "description": "a replay: the job this Idempotency-Key created"}},
)
def submit_job(
    body: JobCreate,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    principal: SubmitPrincipal,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    """Submit a job; params are validated by the stage's model now, not on the host later."""
    # The router owns the request's commit and hands it to the service (as launch's does): the job is
    # committed and its message sent as soon as it is made, not after FastAPI's serialization and the session
    # dependency's exit (two thread hops: ~3 ms on a busy host, before the worker could have the job).
    job, created = service.submit_job(
        session,
        settings,
        spec=body,
        principal=principal,
        idempotency_key=idempotency_key,
        hand_over=session.commit,
    )
    created_or_replayed(response, created)
    return JobRead.of(job)


@router.get("", response_model=JobPage)
def list_jobs(
    session: SessionDep,
    _: ReadPrincipal,
    kind: Annotated[str | None, Query(max_length=32, pattern=r"^[a-z_]+$")] = None,
    state: JobState | None = None,
    host: Annotated[str | None, Query(pattern=HOST_NAME_PATTERN)] = None,
    pipeline_id: uuid.UUID | None = None,
    cursor: PageCursor = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    include_dry_runs: Annotated[
        bool, Query(description="also list dry-run launches (POST /v1/launch/render); hidden by default")
    ] = False,
) -> JobPage:
    """List jobs, newest first, with cursor pagination (dry-run launches only with include_dry_runs=true)."""
    rows, next_cursor = service.list_jobs(
        session,
        kind=kind,
        state=state,
        host=host,
        pipeline_id=pipeline_id,
        cursor=cursor,
        limit=limit,
        include_dry_runs=include_dry_runs,
    )
    return JobPage(items=[JobRead.of(j) for j in rows], next_cursor=next_cursor)


@router.get("/{job_id}", response_model=JobRead, responses={304: {"description": "not modified"}})
def get_job(
    job_id: uuid.UUID, request: Request, response: Response, session: SessionDep, _: ReadPrincipal
) -> JobRead | Response:
    """One job; supports ETag / If-None-Match."""
    job = service.get_job(session, job_id)
    etag = f'W/"{job.id}-{job.version}-{int((job.progress or 0) * 1000)}"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
    response.headers["ETag"] = etag
    return JobRead.of(job)


@router.post("/{job_id}/cancel", response_model=JobRead, status_code=status.HTTP_202_ACCEPTED)
def cancel_job(job_id: uuid.UUID, session: SessionDep, _: SubmitPrincipal) -> JobRead:
    """Request cancel: queued jobs end now, running ones are ended by their worker."""
    return JobRead.of(service.request_cancel(session, job_id=job_id))


@router.get("/{job_id}/wait", response_model=JobRead)
async def wait_job(
    job_id: uuid.UUID,
    request: Request,
    _: ReadPrincipal,
    timeout: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 60.0,
) -> JobRead:
    """Block until the job is terminal or `timeout` seconds pass; check `terminal` in the answer."""
    return await wait_terminal(request.app.state.settings, job_id, timeout, request)


@router.get("/{job_id}/events", response_model=list[JobEventRead])
def job_events(job_id: uuid.UUID, session: SessionDep, _: ReadPrincipal) -> list[JobEventRead]:
    """The job's state history."""
    return [JobEventRead.model_validate(e) for e in service.job_events(session, job_id)]


@router.get("/{job_id}/metrics", response_model=list[MetricRead])
def job_metrics(
    job_id: uuid.UUID,
    session: SessionDep,
    _: ReadPrincipal,
    name: Annotated[str | None, Query(max_length=128, pattern=r"^[^\x00-\x1f]*$")] = None,
    since_step: Annotated[int | None, Query(ge=-1, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 5000,
) -> list[MetricRead]:
    """Metrics the job reported (loss, accuracy per position, throughput…), by step."""
    rows = service.job_metrics(session, job_id, name=name, since_step=since_step, limit=limit)
    return [MetricRead.model_validate(m) for m in rows]
