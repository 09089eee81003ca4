"""/v1/servers and /v1/benchmarks: inference servers started by launch jobs, and benchmark tables."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import PlainTextResponse, StreamingResponse

from app.core.deps import ReadPrincipal, SessionDep, SubmitPrincipal
from app.jobs import service as jobs
from app.logs import router as logs_router
from app.logs.schemas import LogPage
from app.servers import service
from app.servers.schemas import BenchmarkRead, ServerRead

router = APIRouter(tags=["servers"])


@router.get("/v1/servers", response_model=list[ServerRead])
def list_servers(
    session: SessionDep,
    _: ReadPrincipal,
    state: Literal["starting", "ready", "failed", "stopping", "stopped"] | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[ServerRead]:
    """Servers, newest first."""
    return [ServerRead.model_validate(s) for s in service.list_servers(session, state=state, limit=limit)]


@router.get("/v1/servers/{server_id}", response_model=ServerRead)
def get_server(server_id: uuid.UUID, session: SessionDep, _: ReadPrincipal) -> ServerRead:
    """One server: state, URL, argv, pid, GPUs, draft, last acceptance length seen in its log."""
    return ServerRead.model_validate(service.get_server(session, server_id))


@router.post("/v1/servers/{server_id}/stop", response_model=ServerRead, status_code=status.HTTP_202_ACCEPTED)
def stop_server(server_id: uuid.UUID, session: SessionDep, _: SubmitPrincipal) -> ServerRead:
    """Stop a server: its launch job is cancelled (SIGTERM, SIGKILL after a grace period, lease freed)."""
    server = service.get_server(session, server_id)
    jobs.request_cancel(session, job_id=server.job_id, reason="USER_CANCELLED")
    service.mark_stopping(session, server)
    return ServerRead.model_validate(server)


@router.get("/v1/servers/{server_id}/logs", response_model=LogPage, responses=logs_router.PAGE_RESPONSES)
def server_logs(
    server_id: uuid.UUID, session: SessionDep, _: ReadPrincipal, query: logs_router.LogQueryDep
) -> LogPage | PlainTextResponse:
    """The server's log: its launch job's log, paged as for jobs."""
    server = service.get_server(session, server_id)
    return logs_router.page_response(session, server.job_id, query)


@router.get("/v1/servers/{server_id}/logs/stream", responses={200: {"content": {"text/event-stream": {}}}})
def server_log_stream(
    server_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    principal: ReadPrincipal,
    cursor: logs_router.Cursor = 0,
) -> StreamingResponse:
    """Follow the server's log live (SSE), as for jobs."""
    server = service.get_server(session, server_id)
    return logs_router.stream_logs(
        server.job_id,
        request,
        session,
        principal,
        cursor=cursor,
        last_event_id=request.headers.get("last-event-id"),
    )


@router.get("/v1/benchmarks", response_model=list[BenchmarkRead])
def list_benchmarks(
    session: SessionDep,
    _: ReadPrincipal,
    job_id: uuid.UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[BenchmarkRead]:
    """Benchmark results, newest first (optionally of one job)."""
    rows = service.list_benchmarks(session, job_id=job_id, limit=limit)
    return [BenchmarkRead.model_validate(b) for b in rows]


@router.get(
    "/v1/benchmarks/{benchmark_id}",
    response_model=BenchmarkRead,
    responses={200: {"content": {"text/csv": {}}}},
)
def get_benchmark(
    benchmark_id: uuid.UUID, session: SessionDep, _: ReadPrincipal, format: Literal["json", "csv"] = "json"
) -> BenchmarkRead | PlainTextResponse:
    """One benchmark: its comparison table (speedup vs the no-speculation baseline), as JSON or CSV."""
    result = service.get_benchmark(session, benchmark_id)
    if format == "csv":
        return PlainTextResponse(service.benchmark_csv(result), media_type="text/csv")
    return BenchmarkRead.model_validate(result)
