"""All SQL about log lines."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.models.job import Job
from app.models.log import LogLine

LogRow = tuple[int, datetime, str, str]  # seq, ts, stream, text


def insert_lines(session: Session, job_id: uuid.UUID, rows: Sequence[LogRow]) -> None:
    """Insert a batch; lines already stored (a retried batch) are skipped, so shipping is idempotent."""
    if not rows:
        return
    values = [{"job_id": job_id, "seq": s, "ts": ts, "stream": st, "text": t} for s, ts, st, t in rows]
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(insert(LogLine).values(values).on_conflict_do_nothing(index_elements=["job_id", "seq"]))
    last = max(r[0] for r in rows)
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.log_seq < last)
        .values(log_seq=last)
        .execution_options(synchronize_session=False)
    )


def page(
    session: Session, job_id: uuid.UUID, *, after_seq: int, limit: int, stream: str | None = None
) -> list[LogLine]:
    query = select(LogLine).where(LogLine.job_id == job_id, LogLine.seq > after_seq)
    if stream:
        query = query.where(LogLine.stream == stream)
    return list(session.scalars(query.order_by(LogLine.seq).limit(limit)))


def tail(session: Session, job_id: uuid.UUID, *, count: int, stream: str | None = None) -> list[LogLine]:
    query = select(LogLine).where(LogLine.job_id == job_id)
    if stream:
        query = query.where(LogLine.stream == stream)
    rows = list(session.scalars(query.order_by(LogLine.seq.desc()).limit(count)))
    rows.reverse()
    return rows


def last_seq(session: Session, job_id: uuid.UUID) -> int:
    value = session.scalar(select(func.max(LogLine.seq)).where(LogLine.job_id == job_id))
    return int(value or 0)


def delete_before(session: Session, job_id: uuid.UUID, seq: int) -> int:
    result = session.execute(delete(LogLine).where(LogLine.job_id == job_id, LogLine.seq < seq))
    return int(result.rowcount)  # type: ignore[attr-defined]


def delete_for_jobs_finished_before(session: Session, before: datetime) -> int:
    old_jobs = select(Job.id).where(Job.finished_at.is_not(None), Job.finished_at < before)
    result = session.execute(delete(LogLine).where(LogLine.job_id.in_(old_jobs)))
    return int(result.rowcount)  # type: ignore[attr-defined]
