"""Servers as launch jobs report them, and benchmark results. Services never commit."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from app.core.errors import AppError, ErrorCode
from app.jobs import results
from app.models.base import utcnow
from app.models.server import BenchmarkResult, Server
from app.servers import repository

SERVER_STATES = ("starting", "ready", "failed", "stopping", "stopped")
_FINAL = ("failed", "stopped")


def record_server_event(session: Session, *, job_id: uuid.UUID, host: str, event: dict[str, Any]) -> Server:
    """Create or update the server row of a launch job from a `server` event the stage emitted."""
    server = repository.for_job(session, job_id)
    if server is None:
        server = Server(id=uuid.uuid4(), job_id=job_id, host=host, started_at=utcnow(), state="starting")
        repository.add(session, server)
    state = event.get("state")
    if state in SERVER_STATES and server.state not in _FINAL:
        server.state = state
        if state == "ready" and server.ready_at is None:
            server.ready_at = utcnow()
        if state in _FINAL:
            server.stopped_at = utcnow()
    for field in ("url", "argv", "pid", "gpus", "draft", "engine", "message"):
        if event.get(field) is not None:
            setattr(server, field, event[field])
    if event.get("accept_len") is not None:
        server.last_accept_len = float(event["accept_len"])
    session.flush()
    return server


def end_server_of_job(session: Session, *, job_id: uuid.UUID, state: str, message: str | None) -> None:
    """When a launch job ends, its server is over too (stopped, or failed if the job failed/was lost)."""
    server = repository.for_job(session, job_id)
    if server is None or server.state in _FINAL:
        return
    server.state = state
    server.stopped_at = utcnow()
    if message:
        server.message = message


def get_server(session: Session, server_id: uuid.UUID) -> Server:
    server = repository.get(session, server_id)
    if server is None:
        raise AppError(ErrorCode.NOT_FOUND, f"no server {server_id}")
    return server


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
    repository.add_benchmark(session, result)
    return result


def _record_benchmark_job(session: Session, job_id: uuid.UUID, result: dict[str, Any]) -> None:
    """A benchmark job's result with rows becomes a table (a sweep that failed its gate has rows too)."""
    if result.get("rows") is not None:
        record_benchmark(session, job_id=job_id, summary=result)


results.register("benchmark", _record_benchmark_job)


def list_servers(session: Session, *, state: str | None, limit: int) -> list[Server]:
    return repository.all_servers(session, state=state, limit=limit)


def list_benchmarks(session: Session, *, job_id: uuid.UUID | None, limit: int) -> list[BenchmarkResult]:
    return repository.benchmarks(session, job_id=job_id, limit=limit)


def get_benchmark(session: Session, benchmark_id: uuid.UUID) -> BenchmarkResult:
    result = repository.get_benchmark(session, benchmark_id)
    if result is None:
        raise AppError(ErrorCode.NOT_FOUND, f"no benchmark {benchmark_id}")
    return result


def benchmark_csv(result: BenchmarkResult) -> str:
    """The comparison table as CSV, one row per depth (the baseline has an empty depth)."""
    rows = result.summary.get("rows") or []
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


def mark_stopping(session: Session, server: Server) -> None:
    if server.state not in _FINAL:
        server.state = "stopping"
