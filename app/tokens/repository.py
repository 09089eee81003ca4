"""All SQL about API tokens."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models.token import ApiToken


def by_hash(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash))


def get(session: Session, token_id: uuid.UUID) -> ApiToken | None:
    return session.get(ApiToken, token_id)


def all_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.created_at)))


def add(session: Session, token: ApiToken) -> None:
    session.add(token)
