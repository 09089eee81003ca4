"""All SQL about benchmark results."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models.benchmark import BenchmarkResult


def add(session: Session, result: BenchmarkResult) -> None:
    session.add(result)


def page(session: Session, *, job_id: uuid.UUID | None = None, limit: int = 200) -> list[BenchmarkResult]:
    query = select(BenchmarkResult).order_by(BenchmarkResult.created_at.desc()).limit(limit)
    if job_id is not None:
        query = query.where(BenchmarkResult.job_id == job_id)
    return list(session.scalars(query))


def get(session: Session, benchmark_id: uuid.UUID) -> BenchmarkResult | None:
    return session.get(BenchmarkResult, benchmark_id)
