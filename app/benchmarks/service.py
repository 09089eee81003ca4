"""Benchmark results: the tables benchmark jobs produce, read as JSON or CSV. Services never commit."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from app.benchmarks import repository
from app.core.errors import found_or_404
from app.models.base import utcnow
from app.models.benchmark import BenchmarkResult


def record_benchmark(
    session: Session, *, job_id: uuid.UUID, summary: dict[str, Any], server_id: uuid.UUID | None = None
) -> BenchmarkResult:
    gate = summary.get("gate")
    deployable = summary.get("deployable", gate.get("deployable") if isinstance(gate, dict) else None)
    result = BenchmarkResult(
        id=uuid.uuid4(),
        job_id=job_id,
        server_id=server_id,
        summary=summary,
        deployable=bool(deployable) if deployable is not None else None,
        created_at=utcnow(),
    )
    repository.add(session, result)
    return result


def record_benchmark_job(session: Session, job_id: uuid.UUID, result: dict[str, Any]) -> None:
    """A benchmark job's result with rows becomes a table (a sweep that failed its gate has rows too).

    The `benchmark` kind's result recorder (app/jobs/results.py), registered at start-up."""
    if result.get("rows") is not None:
        record_benchmark(session, job_id=job_id, summary=result)


def list_benchmarks(session: Session, *, job_id: uuid.UUID | None, limit: int) -> list[BenchmarkResult]:
    return repository.page(session, job_id=job_id, limit=limit)


def get_benchmark(session: Session, benchmark_id: uuid.UUID) -> BenchmarkResult:
    return found_or_404(repository.get(session, benchmark_id), f"no benchmark {benchmark_id}")


def benchmark_csv(session: Session, benchmark_id: uuid.UUID) -> str:
    """The comparison table as CSV, one row per depth (the baseline has an empty depth)."""
    rows = get_benchmark(session, benchmark_id).summary.get("rows") or []
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns and not isinstance(row[c], dict | list)]
    lines = [",".join(columns)]
    for row in rows:
        lines.append(",".join(_csv_cell(row.get(c)) for c in columns))
    return "\n".join(lines) + "\n"


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    text = str(value)
    if any(ch in text for ch in ',"\n') or text[:1] in ("=", "+", "-", "@"):
        text = '"' + text.replace('"', '""') + '"'  # quoted, and formula-looking cells stay text
    return text
