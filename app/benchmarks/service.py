"""Benchmark results: the tables benchmark jobs produce, read as JSON or CSV. Services never commit."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from app.benchmarks import repository
from app.benchmarks.paired import NotComparable, compare
from app.core.errors import AppError, ErrorCode, found_or_404
from app.core.paging import decode_cursor, page_of
from app.jobs import service as jobs
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


def list_benchmarks(
    session: Session, *, job_id: uuid.UUID | None, cursor: str | None, limit: int
) -> tuple[list[BenchmarkResult], str | None]:
    """Benchmark results, newest first, a page at a time, and the next page's cursor."""
    rows = repository.page(session, job_id=job_id, after=decode_cursor(cursor), limit=limit + 1)
    return page_of(rows, limit, lambda b: (b.created_at, b.id))


def get_benchmark(session: Session, benchmark_id: uuid.UUID) -> BenchmarkResult:
    return found_or_404(repository.get(session, benchmark_id), f"no benchmark {benchmark_id}")


def compare_benchmarks(session: Session, a_id: uuid.UUID, b_id: uuid.UUID) -> dict[str, Any]:
    """Benchmark `a` against `b` on the requests both asked (app/benchmarks/paired.py), with what each
    served: its job, and the draft and target its launch named."""
    if a_id == b_id:
        raise AppError(ErrorCode.NOT_COMPARABLE, "compare a benchmark with another one, not with itself")
    a, b = get_benchmark(session, a_id), get_benchmark(session, b_id)
    try:
        comparison = compare(a.summary, b.summary)
    except NotComparable as exc:
        raise AppError(ErrorCode.NOT_COMPARABLE, str(exc)) from None
    sides = {"a": _side(session, a), "b": _side(session, b)}
    if sides["a"]["target"] != sides["b"]["target"]:
        comparison["notes"].append(
            "the two launches name different targets: two drafts compare on one target (the same model "
            "under two paths is fine)"
        )
    return {**sides, **comparison}


def _side(session: Session, result: BenchmarkResult) -> dict[str, Any]:
    job = jobs.find_job(session, result.job_id)
    params = job.params if job is not None and isinstance(job.params, dict) else {}
    launch = params.get("launch")
    launch = launch if isinstance(launch, dict) else {}
    return {
        "id": str(result.id),
        "job_id": str(result.job_id),
        "created_at": result.created_at.isoformat(),
        "draft": launch.get("draft"),
        "target": launch.get("model"),
        "url": params.get("url"),
    }


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
