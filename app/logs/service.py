"""Reading job logs: pages, tails and the data behind the live follow. Services never commit."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from app.jobs import service as jobs
from app.jobs.states import TERMINAL
from app.logs import repository
from app.logs.follow import FollowEnd, LogHub
from app.logs.schemas import LogLineRead, LogPage, LogQuery

LogRow = repository.LogRow  # seq, ts, stream, text
LinesAlreadyStored = repository.LinesAlreadyStored

MAX_PAGE_LINES = 5000
MAX_PAGE_BYTES = 4 * 1024 * 1024


def read_page(
    session: Session,
    job_id: uuid.UUID,
    *,
    cursor: int,
    limit: int,
    tail: int | None,
    stream: str | None,
) -> LogPage:
    """Lines after `cursor` (or the last `tail` lines), bounded in count and bytes."""
    job = jobs.get_job(session, job_id)  # read first: every line up to job.log_seq is committed by now
    stored_up_to = job.log_seq
    if tail is not None:
        rows = repository.tail(session, job_id, count=min(tail, MAX_PAGE_LINES), stream=stream)
        lines = _bounded([LogLineRead.model_validate(r) for r in rows])
        next_cursor = max([stored_up_to, *(line.seq for line in lines)])
    else:
        wanted = min(limit, MAX_PAGE_LINES)
        rows = repository.page(session, job_id, after_seq=cursor, limit=wanted, stream=stream)
        lines = _bounded([LogLineRead.model_validate(r) for r in rows])
        next_cursor = lines[-1].seq if lines else cursor
        if len(lines) == len(rows) < wanted:
            next_cursor = max(next_cursor, stored_up_to)  # nothing else matched up to the stored end
    complete = job.state in TERMINAL and next_cursor >= stored_up_to
    return LogPage(lines=lines, next_cursor=next_cursor, job_state=job.state, complete=complete)


def read_query(session: Session, job_id: uuid.UUID, query: LogQuery) -> LogPage:
    """The page a log query asks for (404 for an unknown job)."""
    return read_page(
        session, job_id, cursor=query.cursor, limit=query.limit, tail=query.tail, stream=query.stream
    )


def follow(
    session: Session,
    hub: LogHub,
    job_id: uuid.UUID,
    *,
    cursor: int,
    last_event_id: str | None,
    gone: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The job's log as Server-Sent Events from `cursor` (or Last-Event-ID), until it ends or `gone()`.

    An unknown job is a 404 now, before any event is streamed."""
    jobs.get_job(session, job_id)
    return _events(hub, job_id, _resume_point(last_event_id, cursor), gone)


def _resume_point(last_event_id: str | None, cursor: int) -> int:
    if last_event_id and last_event_id.strip().isdigit():
        return int(last_event_id.strip())
    return cursor


async def _events(
    hub: LogHub, job_id: uuid.UUID, cursor: int, gone: Callable[[], Awaitable[bool]]
) -> AsyncIterator[str]:
    yield "retry: 1000\n\n"
    async for item in hub.follow(job_id, cursor):
        if await gone():
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


def store_lines(
    session: Session, job_id: uuid.UUID, rows: Sequence[LogRow], *, maybe_stored: bool = False
) -> None:
    """Store a batch of a job's lines (the worker's shipper); a retry (maybe_stored) skips stored ones."""
    repository.insert_lines(session, job_id, rows, maybe_stored=maybe_stored)


def delete_before(session: Session, job_id: uuid.UUID, seq: int) -> int:
    """Delete a job's lines before `seq` (the shipper's per-job byte limit); returns how many went."""
    return repository.delete_before(session, job_id, seq)


def expire_finished_before(session: Session, cutoff: datetime) -> int:
    """Delete the lines of jobs that ended before `cutoff` (log retention); returns how many went."""
    return repository.delete_for_jobs_finished_before(session, cutoff)


def last_seq(session: Session, job_id: uuid.UUID) -> int:
    """The highest seq stored for the job (0 when none): where a new attempt's lines continue."""
    return repository.last_seq(session, job_id)


def _bounded(lines: list[LogLineRead]) -> list[LogLineRead]:
    total = 0
    for i, line in enumerate(lines):
        total += len(line.text) + 64
        if total > MAX_PAGE_BYTES and i > 0:
            return lines[:i]
    return lines


def render_text(page: LogPage) -> str:
    return "".join(f"{line.text}\n" for line in page.lines)
