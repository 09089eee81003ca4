"""/v1/servers: inference servers started by launch jobs; their logs are their launch jobs' logs."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import PlainTextResponse, StreamingResponse

from app.core.deps import SessionDep
from app.core.paging import PageCursor
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
from app.servers import service
from app.servers.schemas import ServerPage, ServerRead
from app.tokens.deps import ReadPrincipal, SubmitPrincipal

router = APIRouter(tags=["servers"])


@router.get("/v1/servers", response_model=ServerPage)
def list_servers(
    session: SessionDep,
    _: ReadPrincipal,
    state: Literal["starting", "ready", "failed", "stopping", "stopped"] | None = None,
    cursor: PageCursor = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ServerPage:
    """Servers, newest first, with cursor pagination."""
    rows, next_cursor = service.list_servers(session, state=state, cursor=cursor, limit=limit)
    return ServerPage(items=[ServerRead.model_validate(s) for s in rows], next_cursor=next_cursor)


@router.get("/v1/servers/{server_id}", response_model=ServerRead)
def get_server(server_id: uuid.UUID, session: SessionDep, _: ReadPrincipal) -> ServerRead:
    """One server: state, URL, argv, pid, GPUs, draft, last acceptance length seen in its log."""
    return ServerRead.model_validate(service.get_server(session, server_id))


@router.post("/v1/servers/{server_id}/stop", response_model=ServerRead, status_code=status.HTTP_202_ACCEPTED)
def stop_server(server_id: uuid.UUID, session: SessionDep, _: SubmitPrincipal) -> ServerRead:
    """Stop a server: its launch job is cancelled (SIGTERM, SIGKILL after a grace period, lease freed)."""
    return ServerRead.model_validate(service.stop_server(session, server_id=server_id))


@router.get("/v1/servers/{server_id}/logs", response_model=LogPage, responses=PAGE_RESPONSES)
def server_logs(
    server_id: uuid.UUID, session: SessionDep, _: ReadPrincipal, query: LogQueryDep
) -> LogPage | PlainTextResponse:
    """The server's log: its launch job's log, paged as for jobs."""
    return page_response(service.read_logs(session, server_id=server_id, query=query), query)


@router.get("/v1/servers/{server_id}/logs/stream", responses=SSE_RESPONSES)
def server_log_stream(
    server_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    hub: LogHubDep,
    _: ReadPrincipal,
    cursor: Cursor = 0,
) -> StreamingResponse:
    """Follow the server's log live (SSE), as for jobs."""
    events = service.follow_logs(
        session,
        hub,
        server_id=server_id,
        cursor=cursor,
        last_event_id=request.headers.get("last-event-id"),
        gone=request.is_disconnected,
    )
    return sse_response(events)
