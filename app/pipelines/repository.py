"""All SQL about pipelines."""

from __future__ import annotations

import uuid

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.paging import After, newest_first
from app.models.job import Job
from app.models.pipeline import Pipeline


def add(session: Session, pipeline: Pipeline) -> None:
    session.add(pipeline)


def get(session: Session, pipeline_id: uuid.UUID) -> Pipeline | None:
    return session.get(Pipeline, pipeline_id)


def page(session: Session, *, after: After | None, limit: int) -> list[Pipeline]:
    query = newest_first(select(Pipeline), Pipeline.created_at, Pipeline.id, after=after, limit=limit)
    return list(session.scalars(query))


def count_retry(session: Session, pipeline_id: uuid.UUID, *, seen: int) -> bool:
    """Move the retry count from `seen` to seen + 1 in one conditional UPDATE; False when another retry
    moved it first. PostgreSQL makes a concurrent one wait on the row and then re-check `retries = seen`
    against the committed value, so of two retries of one state exactly one wins."""
    moved = session.execute(
        update(Pipeline)
        .where(Pipeline.id == pipeline_id, Pipeline.retries == seen)
        .values(retries=Pipeline.retries + 1)
        .returning(Pipeline.id)
        .execution_options(synchronize_session=False)
    ).first()
    return moved is not None


def jobs_of(session: Session, pipeline_id: uuid.UUID) -> list[Job]:
    query = select(Job).where(Job.pipeline_id == pipeline_id).order_by(Job.created_at, Job.id)
    return list(session.scalars(query))
