"""/v1/launch/render: the exact argv, environment and findings of a launch spec, without starting it."""

from __future__ import annotations

import json
import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from app.core.db import session_scope
from app.core.errors import AppError, ErrorCode
from app.core.security import Principal
from app.jobs.waiting import wait_terminal
from app.launch import service
from app.launch.schemas import RenderRequest, RenderResult
from app.tokens.deps import SubmitPrincipal

router = APIRouter(prefix="/v1/launch", tags=["launch"])


@router.post("/render", response_model=RenderResult)
async def render(body: RenderRequest, request: Request, principal: SubmitPrincipal) -> RenderResult:
    """Render and check a launch on its host (a dry run): argv, env and every finding; nothing starts."""
    return await _render(body, request, principal)


@router.get("/render", response_model=RenderResult)
async def render_get(
    request: Request,
    principal: SubmitPrincipal,
    spec: Annotated[str, Query(max_length=65_536, description="the launch spec as JSON")],
    host: Annotated[str | None, Query(max_length=128)] = None,
    timeout: Annotated[float, Query(gt=0, le=300)] = 60,
) -> RenderResult:
    """The same as POST, with the spec as a JSON query parameter (for curl)."""
    try:
        body = RenderRequest(spec=json.loads(spec), host=host, timeout=timeout)
    except (json.JSONDecodeError, ValidationError, TypeError) as exc:
        raise AppError(ErrorCode.VALIDATION_FAILED, f"spec: {str(exc).splitlines()[0]}") from None
    return await _render(body, request, principal)


async def _render(body: RenderRequest, request: Request, principal: Principal) -> RenderResult:
    settings = request.app.state.settings

    def submit() -> uuid.UUID:
        with session_scope(settings) as session:
            return service.submit_dry_run(session, settings, body=body, principal=principal).id

    job_id = await run_in_threadpool(submit)
    job = await wait_terminal(settings, job_id, body.timeout, request)
    return service.result_of(job)
