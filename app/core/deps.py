"""Request-scoped dependencies every domain shares: the database session, the settings, the Idempotency-Key.

Who is calling (the bearer token → Principal) lives in the tokens domain: app/tokens/deps.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request, Response, status
from sqlalchemy.orm import Session

from app.core.config import Settings, get_settings
from app.core.db import session_scope


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request: committed when the handler returns, rolled back if it raises."""
    with session_scope(request.app.state.settings) as session:
        yield session


def settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SessionDep = Annotated[Session, Depends(get_session, scope="function")]  # commit before the response is sent
SettingsDep = Annotated[Settings, Depends(settings_dep)]
IdempotencyKey = Annotated[str | None, Header(max_length=255, pattern=r"^[\x21-\x7e]+$")]


def created_or_replayed(response: Response, created: bool) -> None:
    """An idempotent create answers 201 when it made the resource, 200 when an Idempotency-Key replayed it."""
    if not created:
        response.status_code = status.HTTP_200_OK


__all__ = ["get_settings"]
