"""Reading job logs: pages, tails and the data behind the live follow. Services never commit."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.jobs import service as jobs
from app.jobs.states import TERMINAL
from app.logs import repository
from app.logs.schemas import LogLineRead, LogPage

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


def _bounded(lines: list[LogLineRead]) -> list[LogLineRead]:
    total = 0
    for i, line in enumerate(lines):
        total += len(line.text) + 64
        if total > MAX_PAGE_BYTES and i > 0:
            return lines[:i]
    return lines


def render_text(page: LogPage) -> str:
    return "".join(f"{line.text}\n" for line in page.lines)
