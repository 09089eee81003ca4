"""All SQL about benchmark results."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.paging import After, newest_first
from app.models.benchmark import BenchmarkResult


def add(session: Session, result: BenchmarkResult) -> None:
    session.add(result)


def page(
    session: Session, *, job_id: uuid.UUID | None = None, after: After | None = None, limit: int = 200
) -> list[BenchmarkResult]:
    query = select(BenchmarkResult)
    if job_id is not None:
        query = query.where(BenchmarkResult.job_id == job_id)
    query = newest_first(query, BenchmarkResult.created_at, BenchmarkResult.id, after=after, limit=limit)
    return list(session.scalars(query))


def get(session: Session, benchmark_id: uuid.UUID) -> BenchmarkResult | None:
    return session.get(BenchmarkResult, benchmark_id)
