"""The app the dashboard tests serve: the real API, with the dashboard router added if app/api.py does not
include it yet (it is included there once; adding it twice would register `/` twice)."""

from __future__ import annotations

from fastapi import FastAPI

from app.core.config import get_settings
from app.dashboard.router import router as dashboard_router
from app.main import create_app


def create() -> FastAPI:
    app = create_app(get_settings())
    if not any(getattr(route, "path", None) == "/" for route in app.routes):
        app.include_router(dashboard_router)
    return app
