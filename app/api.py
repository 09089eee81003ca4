"""Every router, included once."""

from __future__ import annotations

from fastapi import FastAPI

from app.apidoc.router import router as apidoc_router
from app.artifacts.router import router as artifacts_router
from app.benchmarks.router import router as benchmarks_router
from app.dashboard.router import router as dashboard_router
from app.health.router import router as health_router
from app.hosts.router import router as hosts_router
from app.jobs.router import router as jobs_router
from app.launch.router import router as launch_router
from app.logs.router import router as logs_router
from app.metrics.router import router as metrics_router
from app.pipelines.router import router as pipelines_router
from app.servers.router import router as servers_router
from app.tokens.router import router as tokens_router


def include_routers(app: FastAPI) -> None:
    for router in (
        health_router,
        jobs_router,
        logs_router,
        hosts_router,
        servers_router,
        benchmarks_router,
        artifacts_router,
        tokens_router,
        metrics_router,
        pipelines_router,
        dashboard_router,
        launch_router,
        apidoc_router,
    ):
        app.include_router(router)
