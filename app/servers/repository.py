"""All SQL about servers."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.paging import After, newest_first
from app.models.server import Server


def get(session: Session, server_id: uuid.UUID) -> Server | None:
    return session.get(Server, server_id)


def for_job(session: Session, job_id: uuid.UUID) -> Server | None:
    return session.scalar(select(Server).where(Server.job_id == job_id))


def add(session: Session, server: Server) -> None:
    session.add(server)


def page(
    session: Session, *, state: str | None = None, after: After | None = None, limit: int = 200
) -> list[Server]:
    query = select(Server)
    if state:
        query = query.where(Server.state == state)
    query = newest_first(query, Server.started_at, Server.id, after=after, limit=limit)
    return list(session.scalars(query))
