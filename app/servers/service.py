"""Servers as launch jobs report them: their rows, stopping them, their logs. Services never commit."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sqlalchemy.orm import Session

from app.core.errors import found_or_404
from app.core.paging import decode_cursor, page_of
from app.jobs import service as jobs
from app.logs import service as logs
from app.logs.follow import LogHub
from app.logs.schemas import LogPage, LogQuery
from app.models.base import utcnow
from app.models.server import Server
from app.servers import repository
from contract.reasons import TerminationReason

SERVER_STATES = ("starting", "ready", "failed", "stopping", "stopped")
_FINAL = ("failed", "stopped")


def record_server_event(session: Session, *, job_id: uuid.UUID, host: str, event: dict[str, Any]) -> Server:
    """Create or update the server row of a launch job from a `server` event the stage emitted."""
    server = repository.for_job(session, job_id)
    if server is None:
        server = Server(id=uuid.uuid4(), job_id=job_id, host=host, started_at=utcnow(), state="starting")
        repository.add(session, server)
    state = event.get("state")
    if state in SERVER_STATES and server.state not in _FINAL:
        server.state = state
        if state == "ready" and server.ready_at is None:
            server.ready_at = utcnow()
        if state in _FINAL:
            server.stopped_at = utcnow()
    for field in ("url", "argv", "pid", "gpus", "draft", "engine", "message"):
        if event.get(field) is not None:
            setattr(server, field, event[field])
    if event.get("accept_len") is not None:
        server.last_accept_len = float(event["accept_len"])
    session.flush()
    return server


def end_server_of_job(session: Session, *, job_id: uuid.UUID, state: str, message: str | None) -> None:
    """When a launch job ends, its server is over too (stopped, or failed if the job failed/was lost)."""
    server = repository.for_job(session, job_id)
    if server is None or server.state in _FINAL:
        return
    server.state = state
    server.stopped_at = utcnow()
    if message:
        server.message = message


def get_server(session: Session, server_id: uuid.UUID) -> Server:
    return found_or_404(repository.get(session, server_id), f"no server {server_id}")


def list_servers(
    session: Session, *, state: str | None, cursor: str | None, limit: int
) -> tuple[list[Server], str | None]:
    """Servers, newest first, a page at a time, and the next page's cursor."""
    rows = repository.page(session, state=state, after=decode_cursor(cursor), limit=limit + 1)
    return page_of(rows, limit, lambda s: (s.started_at, s.id))


def stop_server(session: Session, *, server_id: uuid.UUID) -> Server:
    """Cancel the server's launch job (its worker ends the process group, frees the lease); it is stopping."""
    server = get_server(session, server_id)
    jobs.request_cancel(session, job_id=server.job_id, reason=TerminationReason.USER_CANCELLED)
    if server.state not in _FINAL:
        server.state = "stopping"
    return server


def read_logs(session: Session, *, server_id: uuid.UUID, query: LogQuery) -> LogPage:
    """A page of the server's log: its launch job's log."""
    return logs.read_query(session, get_server(session, server_id).job_id, query)


def follow_logs(
    session: Session,
    hub: LogHub,
    *,
    server_id: uuid.UUID,
    cursor: int,
    last_event_id: str | None,
    gone: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The server's log live (Server-Sent Events), as for its launch job."""
    job_id = get_server(session, server_id).job_id
    return logs.follow(session, hub, job_id, cursor=cursor, last_event_id=last_event_id, gone=gone)
