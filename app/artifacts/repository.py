"""All SQL about artifacts."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.paging import After, newest_first
from app.models.artifact import Artifact


def add(session: Session, artifact: Artifact) -> None:
    session.add(artifact)


def get(session: Session, artifact_id: uuid.UUID) -> Artifact | None:
    return session.get(Artifact, artifact_id)


def for_jobs(session: Session, job_ids: list[uuid.UUID]) -> list[Artifact]:
    if not job_ids:
        return []
    return list(session.scalars(select(Artifact).where(Artifact.job_id.in_(job_ids))))


def page(
    session: Session, *, kind: str | None, job_id: uuid.UUID | None, after: After | None, limit: int
) -> list[Artifact]:
    query = select(Artifact)
    if kind:
        query = query.where(Artifact.kind == kind)
    if job_id:
        query = query.where(Artifact.job_id == job_id)
    query = newest_first(query, Artifact.created_at, Artifact.id, after=after, limit=limit)
    return list(session.scalars(query))
