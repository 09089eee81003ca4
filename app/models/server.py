"""Inference servers started by launch jobs, benchmark results and artifacts (lineage)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, UtcDateTime, utcnow


class Server(Base):
    __tablename__ = "server"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), unique=True)
    host: Mapped[str | None] = mapped_column(String(128))
    engine: Mapped[str | None] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16), default="starting")
    url: Mapped[str | None] = mapped_column(String(512))
    argv: Mapped[list[str] | None] = mapped_column(JSON)
    pid: Mapped[int | None] = mapped_column(Integer)
    gpus: Mapped[list[int] | None] = mapped_column(JSON)
    draft: Mapped[str | None] = mapped_column(Text)
    last_accept_len: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    stopped_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class BenchmarkResult(Base):
    __tablename__ = "benchmark_result"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    server_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    deployable: Mapped[bool | None] = mapped_column()
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Artifact(Base):
    __tablename__ = "artifact"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(64))
    host: Mapped[str | None] = mapped_column(String(128))
    path: Mapped[str] = mapped_column(Text)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    parent_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
