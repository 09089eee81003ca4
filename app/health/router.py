"""/healthz (the process is up) and /readyz (database and broker reachable). No auth."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.core.config import Settings
from app.core.db import ping
from app.core.errors import PROBLEM_JSON
from app.core.queue import broker_reachable

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The API process is up."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """The database and the broker answer."""
    settings: Settings = request.app.state.settings
    db_ok, db_detail = await run_in_threadpool(ping, settings)
    broker_ok, broker_detail = await run_in_threadpool(broker_reachable, settings)
    body: dict[str, object] = {
        "status": "ok" if db_ok and broker_ok else "unavailable",
        "database": {"ok": db_ok, "detail": db_detail},
        "broker": {"ok": broker_ok, "detail": broker_detail},
    }
    if db_ok and broker_ok:
        return JSONResponse(body)
    body.update({"code": "NOT_READY", "status_code": 503, "detail": "database or broker unreachable"})
    return JSONResponse(body, status_code=503, media_type=PROBLEM_JSON)
