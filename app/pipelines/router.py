"""/v1/pipelines: the whole journey, extract → train → fix_keys → gpu_check → eval → benchmark."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app.core.deps import IdempotencyKey, SessionDep, SettingsDep, created_or_replayed
from app.core.paging import PageCursor
from app.pipelines import service
from app.pipelines.schemas import Eagle3PipelineCreate, PipelinePage, PipelineRead, PipelineRetry
from app.tokens.deps import ReadPrincipal, SubmitPrincipal

router = APIRouter(prefix="/v1/pipelines", tags=["pipelines"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=PipelineRead,
    responses={
        200: {"model": PipelineRead, "description": "a replay: the pipeline this Idempotency-Key made"}
    },
)
def create_pipeline(
    body: Eagle3PipelineCreate,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    principal: SubmitPrincipal,
    idempotency_key: IdempotencyKey = None,
) -> PipelineRead:
    """Start a pipeline from the `eagle3` template; every step's params are validated first."""
    pipeline, created = service.create_pipeline(
        session, settings, spec=body, principal=principal, idempotency_key=idempotency_key
    )
    created_or_replayed(response, created)
    return pipeline


@router.get("", response_model=PipelinePage)
def list_pipelines(
    session: SessionDep,
    _: ReadPrincipal,
    cursor: PageCursor = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> PipelinePage:
    """Pipelines, newest first, with their steps' latest jobs, with cursor pagination."""
    return service.list_pipelines(session, cursor=cursor, limit=limit)


@router.get("/{pipeline_id}", response_model=PipelineRead)
def get_pipeline(pipeline_id: uuid.UUID, session: SessionDep, _: ReadPrincipal) -> PipelineRead:
    """One pipeline: every step's state, progress and result, and the first step that failed."""
    return service.read_pipeline(session, pipeline_id)


@router.post("/{pipeline_id}/cancel", response_model=PipelineRead, status_code=status.HTTP_202_ACCEPTED)
def cancel_pipeline(pipeline_id: uuid.UUID, session: SessionDep, _: SubmitPrincipal) -> PipelineRead:
    """Cancel the running and waiting steps."""
    return service.cancel_pipeline(session, pipeline_id=pipeline_id)


@router.post("/{pipeline_id}/retry", response_model=PipelineRead)
def retry_pipeline(
    pipeline_id: uuid.UUID,
    session: SessionDep,
    settings: SettingsDep,
    principal: SubmitPrincipal,
    retry: PipelineRetry | None = None,
) -> PipelineRead:
    """Rerun from the failed step (or `from_step`), optionally with changed step params, reusing what the
    steps before it produced."""
    return service.retry_pipeline(
        session, settings, pipeline_id=pipeline_id, principal=principal, retry=retry
    )
