"""All SQL about servers."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models.server import Server


def get(session: Session, server_id: uuid.UUID) -> Server | None:
    return session.get(Server, server_id)


def for_job(session: Session, job_id: uuid.UUID) -> Server | None:
    return session.scalar(select(Server).where(Server.job_id == job_id))


def add(session: Session, server: Server) -> None:
    session.add(server)


def all_servers(session: Session, *, state: str | None = None, limit: int = 200) -> list[Server]:
    query = select(Server).order_by(Server.started_at.desc()).limit(limit)
    if state:
        query = query.where(Server.state == state)
    return list(session.scalars(query))
