"""/v1/jobs/{id}/logs: pages, tail, plain text, and a live Server-Sent Events stream."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from app.core.deps import SessionDep
from app.logs import service
from app.logs.http import (
    PAGE_RESPONSES,
    SSE_RESPONSES,
    Cursor,
    LogHubDep,
    LogQueryDep,
    page_response,
    sse_response,
)
from app.logs.schemas import LogPage
from app.tokens.deps import ReadPrincipal

router = APIRouter(prefix="/v1/jobs", tags=["logs"])


@router.get("/{job_id}/logs", response_model=LogPage, responses=PAGE_RESPONSES)
def read_logs(
    job_id: uuid.UUID, session: SessionDep, _: ReadPrincipal, query: LogQueryDep
) -> LogPage | PlainTextResponse:
    """A page of log lines after `cursor`, or the last `tail` lines; `format=text` for curl."""
    return page_response(service.read_query(session, job_id, query), query)


@router.get("/{job_id}/logs/stream", responses=SSE_RESPONSES)
def stream_logs(
    job_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    hub: LogHubDep,
    _: ReadPrincipal,
    cursor: Cursor = 0,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> StreamingResponse:
    """Follow the log live (SSE): `line` events (id = seq), resume with Last-Event-ID, a final `end`."""
    events = service.follow(
        session, hub, job_id, cursor=cursor, last_event_id=last_event_id, gone=request.is_disconnected
    )
    return sse_response(events)
