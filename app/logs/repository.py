"""All SQL about log lines."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

from app.models.job import Job
from app.models.log import LogLine

LogRow = tuple[int, datetime, str, str]  # seq, ts, stream, text


def insert_lines(
    session: Session, job_id: uuid.UUID, rows: Sequence[LogRow], *, maybe_stored: bool = False
) -> None:
    """Insert a batch; a retry (maybe_stored) skips lines already stored, so shipping is idempotent."""
    if not rows:
        return
    if session.get_bind().dialect.name == "postgresql":
        _copy_lines_postgres(session, job_id, rows, maybe_stored=maybe_stored)
    else:
        values = [{"job_id": job_id, "seq": s, "ts": ts, "stream": st, "text": t} for s, ts, st, t in rows]
        statement = sqlite.insert(LogLine).on_conflict_do_nothing(index_elements=["job_id", "seq"])
        session.execute(statement, values)
    last = max(r[0] for r in rows)
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.log_seq < last)
        .values(log_seq=last)
        .execution_options(synchronize_session=False)
    )


class LinesAlreadyStored(Exception):
    """A first attempt met lines a previous attempt stored; retry with maybe_stored=True."""


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_lines_postgres(
    session: Session, job_id: uuid.UUID, rows: Sequence[LogRow], *, maybe_stored: bool
) -> None:
    # COPY is about ten times faster than INSERTs. A first attempt copies straight into log_line (a
    # duplicate would raise, and the shipper then retries with maybe_stored); a retry goes through a
    # staging table and INSERT … ON CONFLICT DO NOTHING, since COPY alone cannot skip duplicates.
    connection = session.connection()
    target = "log_line"
    if maybe_stored:
        connection.exec_driver_sql(
            "CREATE TEMP TABLE IF NOT EXISTS log_line_staging "
            "(LIKE log_line INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        target = "log_line_staging"
    job = str(job_id)
    payload = "".join(
        f"{job}\t{seq}\t{ts.isoformat()}\t{stream}\t{text.translate(_COPY_ESCAPES)}\n"
        for seq, ts, stream, text in rows
    )
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    from psycopg.errors import UniqueViolation  # here: only PostgreSQL deployments need psycopg

    try:
        with cursor.copy(f"COPY {target} (job_id, seq, ts, stream, text) FROM STDIN") as copy:
            copy.write(payload)
    except UniqueViolation as exc:
        raise LinesAlreadyStored(f"job {job_id}: some of these lines are already stored") from exc
    if maybe_stored:
        connection.exec_driver_sql(
            "INSERT INTO log_line SELECT * FROM log_line_staging ON CONFLICT (job_id, seq) DO NOTHING"
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
