"""/metrics: Prometheus text format (scrape with a read-scoped bearer token)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.core.deps import SessionDep, SettingsDep
from app.metrics import service
from app.tokens.deps import ReadPrincipal

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(session: SessionDep, settings: SettingsDep, _: ReadPrincipal) -> Response:
    """Jobs by kind and state, dispatch latency, log lines, hosts and GPUs, servers and acceptance."""
    return Response(service.exposition(session, settings), media_type=CONTENT_TYPE_LATEST)
