"""All SQL about pipelines."""

from __future__ import annotations

import uuid

from sqlalchemy import select
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


def jobs_of(session: Session, pipeline_id: uuid.UUID) -> list[Job]:
    query = select(Job).where(Job.pipeline_id == pipeline_id).order_by(Job.created_at, Job.id)
    return list(session.scalars(query))
