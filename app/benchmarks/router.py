"""/v1/benchmarks: the comparison tables benchmark jobs produced."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse

from app.benchmarks import service
from app.benchmarks.schemas import BenchmarkComparison, BenchmarkPage, BenchmarkRead
from app.core.deps import SessionDep
from app.core.paging import PageCursor
from app.tokens.deps import ReadPrincipal

router = APIRouter(tags=["servers"])


@router.get("/v1/benchmarks", response_model=BenchmarkPage)
def list_benchmarks(
    session: SessionDep,
    _: ReadPrincipal,
    job_id: uuid.UUID | None = None,
    cursor: PageCursor = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> BenchmarkPage:
    """Benchmark results, newest first (optionally of one job), with cursor pagination."""
    rows, next_cursor = service.list_benchmarks(session, job_id=job_id, cursor=cursor, limit=limit)
    return BenchmarkPage(items=[BenchmarkRead.model_validate(b) for b in rows], next_cursor=next_cursor)


@router.get("/v1/benchmarks/compare", response_model=BenchmarkComparison)
def compare_benchmarks(
    a: uuid.UUID, b: uuid.UUID, session: SessionDep, _: ReadPrincipal
) -> BenchmarkComparison:
    """Draft `a` against draft `b` on the requests both benchmarks asked: which accepts more, by how much,
    with a paired 95 % interval over prompts. 409 NOT_COMPARABLE when they asked different requests."""
    return BenchmarkComparison.model_validate(service.compare_benchmarks(session, a, b))


@router.get(
    "/v1/benchmarks/{benchmark_id}",
    response_model=BenchmarkRead,
    responses={200: {"content": {"text/csv": {}}}},
)
def get_benchmark(
    benchmark_id: uuid.UUID, session: SessionDep, _: ReadPrincipal, format: Literal["json", "csv"] = "json"
) -> BenchmarkRead | PlainTextResponse:
    """One benchmark: its comparison table (speedup vs the no-speculation baseline), as JSON or CSV."""
    if format == "csv":
        return PlainTextResponse(service.benchmark_csv(session, benchmark_id), media_type="text/csv")
    return BenchmarkRead.model_validate(service.get_benchmark(session, benchmark_id))
