"""The HTTP shapes of a job's log, shared by every route that serves one (a job's, a server's): the page
query, plain-text pages and the Server-Sent Events response. Reading the log is the service's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import Depends, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from app.logs import service
from app.logs.follow import LogHub
from app.logs.schemas import LogPage, LogQuery

Cursor = Annotated[int, Query(ge=0, le=2**62)]
PAGE_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/plain": {}}}}
SSE_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/event-stream": {}}}}


def log_query(
    cursor: Cursor = 0,
    limit: Annotated[int, Query(ge=1, le=service.MAX_PAGE_LINES)] = 1000,
    tail: Annotated[int | None, Query(ge=1, le=service.MAX_PAGE_LINES)] = None,
    stream: Literal["stdout", "stderr"] | None = None,
    format: Literal["json", "text"] = "json",
) -> LogQuery:
    return LogQuery(cursor, limit, tail, stream, format)


def log_hub(request: Request) -> LogHub:
    """This API process's live-follow hub (one feed per followed job), made on first use."""
    hub: LogHub | None = getattr(request.app.state, "log_hub", None)
    if hub is None:
        hub = request.app.state.log_hub = LogHub(request.app.state.settings)
    return hub


LogQueryDep = Annotated[LogQuery, Depends(log_query)]
LogHubDep = Annotated[LogHub, Depends(log_hub)]


def page_response(page: LogPage, query: LogQuery) -> LogPage | PlainTextResponse:
    """A page of the log as JSON, or as plain text with the cursor in headers."""
    if query.format == "text":
        headers = {"X-Next-Cursor": str(page.next_cursor), "X-Log-Complete": str(page.complete).lower()}
        return PlainTextResponse(service.render_text(page), headers=headers)
    return page


def sse_response(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
