"""The queries behind /metrics: aggregates only, one pass each."""

from __future__ import annotations

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.core.db import is_postgres
from app.models.host import Host
from app.models.job import Job
from app.models.server import Server

DISPATCH_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def jobs_by_kind_state(session: Session) -> list[tuple[str, str, int]]:
    rows = session.execute(select(Job.kind, Job.state, func.count()).group_by(Job.kind, Job.state))
    return [(k, s, int(n)) for k, s, n in rows]


def log_lines_shipped(session: Session) -> int:
    return int(session.scalar(select(func.coalesce(func.sum(Job.log_seq), 0))) or 0)


def dispatch_latencies(session: Session) -> tuple[list[int], int, float]:
    """(cumulative count per bucket, count, sum) of queued → running over every job that ran."""
    delay = (
        func.extract("epoch", Job.running_at - Job.queued_at)
        if is_postgres(session)
        else ((func.julianday(Job.running_at) - func.julianday(Job.queued_at)) * 86400.0)
    )
    columns = [func.sum(case((delay <= b, 1), else_=0)) for b in DISPATCH_BUCKETS_S]
    query = select(*columns, func.count(), func.coalesce(func.sum(delay), 0.0)).where(
        Job.running_at.is_not(None), Job.queued_at.is_not(None)
    )
    row = session.execute(query).one()
    counts = [int(v or 0) for v in row[: len(DISPATCH_BUCKETS_S)]]
    return counts, int(row[-2] or 0), float(row[-1] or 0.0)


def hosts(session: Session) -> list[Host]:
    return list(session.scalars(select(Host)))


def servers(session: Session) -> list[Server]:
    return list(session.scalars(select(Server).where(Server.state.in_(["starting", "ready", "stopping"]))))
