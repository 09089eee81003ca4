"""/v1/jobs/{id}/logs: pages, tail, plain text, and a live Server-Sent Events stream."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from sqlalchemy.orm import Session

from app.core.deps import ReadPrincipal, SessionDep
from app.logs import service
from app.logs.follow import FollowEnd, LogHub
from app.logs.schemas import LogLineRead, LogPage

router = APIRouter(prefix="/v1/jobs", tags=["logs"])

Cursor = Annotated[int, Query(ge=0, le=2**62)]
PAGE_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/plain": {}}}}


@dataclass(frozen=True)
class LogQuery:
    """What a log page request asks for; shared by every route that serves a job's log in pages."""

    cursor: int
    limit: int
    tail: int | None
    stream: Literal["stdout", "stderr"] | None
    format: Literal["json", "text"]


def log_query(
    cursor: Cursor = 0,
    limit: Annotated[int, Query(ge=1, le=service.MAX_PAGE_LINES)] = 1000,
    tail: Annotated[int | None, Query(ge=1, le=service.MAX_PAGE_LINES)] = None,
    stream: Literal["stdout", "stderr"] | None = None,
    format: Literal["json", "text"] = "json",
) -> LogQuery:
    return LogQuery(cursor, limit, tail, stream, format)


LogQueryDep = Annotated[LogQuery, Depends(log_query)]


def page_response(session: Session, job_id: uuid.UUID, query: LogQuery) -> LogPage | PlainTextResponse:
    """A page of the job's log as JSON, or as plain text with the cursor in headers."""
    page = service.read_page(
        session, job_id, cursor=query.cursor, limit=query.limit, tail=query.tail, stream=query.stream
    )
    if query.format == "text":
        headers = {"X-Next-Cursor": str(page.next_cursor), "X-Log-Complete": str(page.complete).lower()}
        return PlainTextResponse(service.render_text(page), headers=headers)
    return page


@router.get("/{job_id}/logs", response_model=LogPage, responses=PAGE_RESPONSES)
def read_logs(
    job_id: uuid.UUID, session: SessionDep, _: ReadPrincipal, query: LogQueryDep
) -> LogPage | PlainTextResponse:
    """A page of log lines after `cursor`, or the last `tail` lines; `format=text` for curl."""
    return page_response(session, job_id, query)


@router.get("/{job_id}/logs/stream", responses={200: {"content": {"text/event-stream": {}}}})
def stream_logs(
    job_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    _: ReadPrincipal,
    cursor: Cursor = 0,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> StreamingResponse:
    """Follow the log live (SSE): `line` events (id = seq), resume with Last-Event-ID, a final `end`."""
    service.read_page(session, job_id, cursor=0, limit=1, tail=None, stream=None)  # 404 before streaming
    start = _resume_point(last_event_id, cursor)
    hub = _hub(request)
    return StreamingResponse(
        _events(hub, request, job_id, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _resume_point(last_event_id: str | None, cursor: int) -> int:
    if last_event_id and last_event_id.strip().isdigit():
        return int(last_event_id.strip())
    return cursor


def _hub(request: Request) -> LogHub:
    hub: LogHub | None = getattr(request.app.state, "log_hub", None)
    if hub is None:
        hub = request.app.state.log_hub = LogHub(request.app.state.settings)
    return hub


async def _events(hub: LogHub, request: Request, job_id: uuid.UUID, cursor: int) -> AsyncIterator[str]:
    yield "retry: 1000\n\n"
    async for item in hub.follow(job_id, cursor):
        if await request.is_disconnected():
            return
        if item is None:
            yield ": keep-alive\n\n"
        elif isinstance(item, FollowEnd):
            data = json.dumps({"state": item.state, "last_seq": item.last_seq})
            yield f"id: {item.last_seq}\nevent: end\ndata: {data}\n\n"
            return
        else:
            yield "".join(_sse_line(line) for line in item)


def _sse_line(line: LogLineRead) -> str:
    data = {"seq": line.seq, "ts": line.ts.isoformat(), "stream": line.stream, "text": line.text}
    return f"id: {line.seq}\nevent: line\ndata: {json.dumps(data)}\n\n"
