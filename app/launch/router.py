"""/v1/launch/render: the exact argv, environment and findings of a launch spec, without starting it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError

from app.core import bounded_json
from app.core.bounded_json import JsonRefused
from app.core.deps import SessionDep, SettingsDep
from app.core.errors import AppError, ErrorCode
from app.launch import service
from app.launch.schemas import RenderRequest, RenderResult
from app.tokens.deps import SubmitPrincipal

router = APIRouter(prefix="/v1/launch", tags=["launch"])


@router.post("/render", response_model=RenderResult)
async def render(
    body: RenderRequest,
    request: Request,
    principal: SubmitPrincipal,
    session: SessionDep,
    settings: SettingsDep,
) -> RenderResult:
    """Render and check a launch on its host (a dry run): argv, env and every finding; nothing starts."""
    # The request's unit of work commits the dry-run job before the wait (the worker must see it): the
    # router owns that commit and hands it to the service, which never commits.
    return await service.render(
        session, settings, body=body, principal=principal, hand_over=session.commit, request=request
    )


@router.get("/render", response_model=RenderResult)
async def render_get(
    request: Request,
    principal: SubmitPrincipal,
    session: SessionDep,
    settings: SettingsDep,
    spec: Annotated[str, Query(max_length=65_536, description="the launch spec as JSON")],
    host: Annotated[str | None, Query(max_length=128)] = None,
    timeout: Annotated[float, Query(gt=0, le=300)] = 60,
) -> RenderResult:
    """The same as POST, with the spec as a JSON query parameter (for curl)."""
    try:
        body = RenderRequest(spec=bounded_json.loads(spec), host=host, timeout=timeout)
    except JsonRefused as refused:
        raise refused.as_error("query", "spec") from None
    except (ValueError, ValidationError, TypeError) as exc:
        raise AppError(ErrorCode.VALIDATION_FAILED, f"spec: {str(exc).splitlines()[0]}") from None
    return await service.render(
        session, settings, body=body, principal=principal, hand_over=session.commit, request=request
    )
