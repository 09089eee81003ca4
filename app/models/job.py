"""Jobs, their state history and dependencies."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, UtcDateTime, utcnow


class Job(Base):
    __tablename__ = "job"
    __table_args__ = (
        Index("ix_job_state_host", "state", "host"),
        Index("ix_job_created", "created_at", "id"),
        Index("ix_job_pipeline", "pipeline_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    kind: Mapped[str] = mapped_column(String(32))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    host: Mapped[str | None] = mapped_column(String(128))
    gpus_requested: Mapped[int] = mapped_column(Integer, default=0)
    gpu_indices: Mapped[list[int] | None] = mapped_column(JSON)
    max_attempts: Mapped[int] = mapped_column(Integer, default=1)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    timeout_s: Mapped[float | None] = mapped_column(Float)
    pipeline_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    pipeline_step: Mapped[str | None] = mapped_column(String(32))
    # {"dotted.param": {"job": "<id>", "artifact": "<kind>"}}: filled from that job's newest artifact of that
    # kind when this job is queued, so a step reads exactly what the step before it produced.
    param_refs: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_by: Mapped[str | None] = mapped_column(String(64))

    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    queued_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    dispatched_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    dispatch_count: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    running_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    worker: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    pgid: Mapped[int | None] = mapped_column(Integer)
    proc_create_time: Mapped[float | None] = mapped_column(Float)
    proc_reaped: Mapped[bool] = mapped_column(default=False)

    progress: Mapped[float | None] = mapped_column(Float)
    progress_message: Mapped[str | None] = mapped_column(String(512))
    termination_reason: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str | None] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    log_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    version: Mapped[int] = mapped_column(Integer, default=1)


class JobEvent(Base):
    __tablename__ = "job_event"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class JobDependency(Base):
    __tablename__ = "job_dependency"

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), primary_key=True)
    depends_on_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("job.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class IdempotencyKey(Base):
    __tablename__ = "idempotency_key"

    principal: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    body_hash: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class JobMetric(Base):
    __tablename__ = "job_metric"
    __table_args__ = (Index("ix_job_metric_job_name_step", "job_id", "name", "step"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    step: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float] = mapped_column(Float)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
