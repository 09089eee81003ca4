"""create_app(): the FastAPI application."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.middleware.gzip import GZipMiddleware

from app.api import include_routers
from app.core.config import Settings, get_settings
from app.core.db import dispose_engines
from app.core.errors import install_error_handlers
from app.core.limits import BodySizeLimit
from app.core.methods import HeadAndOptions
from app.core.openapi import install_openapi
from app.core.security import FailureLimiter, PrincipalCache
from app.maintenance.loop import MaintenanceLoop
from app.recorders import register_result_recorders

GZIP_MIN_BYTES = 1024


def create_app(settings: Settings | None = None, *, clock: Callable[[], float] = time.monotonic) -> FastAPI:
    """The API. `clock` (monotonic seconds) is what the token cache and the failure limiter read."""
    settings = settings or get_settings()
    register_result_recorders()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:  # noqa: ARG001 - FastAPI's lifespan signature
        loop = MaintenanceLoop(settings) if settings.api_maintenance else None
        if loop is not None:
            loop.start()
        yield
        if loop is not None:
            loop.stop()
        dispose_engines()

    app = FastAPI(
        title="eyas",
        description="Control plane for training EAGLE-3 drafters and serving them with SGLang.",
        version="0.1.0",
        lifespan=lifespan,
        # The document is served to tokens only (app/apidoc), and no viewer page (theirs load from a CDN).
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        # A path is the path: a redirect to the slash-less one would be built from the client's Host header.
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.auth_limiter = FailureLimiter(settings.auth_failures_per_minute, clock=clock)
    app.state.principal_cache = PrincipalCache(settings.auth_cache_s, clock=clock)
    install_error_handlers(app)
    install_openapi(app)
    include_routers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    # Log pages, results and the dashboard's scripts shrink 5-10x; Server-Sent Events are never compressed
    # (Starlette excludes text/event-stream), so live logs stay live.
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MIN_BYTES)
    app.add_middleware(HeadAndOptions, routes=app.router.routes)
    return app
