"""GPU hosts (one per worker) and exclusive GPU leases."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, UtcDateTime, utcnow


class Host(Base):
    __tablename__ = "host"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    registered_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    gpu_error: Mapped[str | None] = mapped_column(Text)
    shm: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    allowed_roots: Mapped[list[str]] = mapped_column(JSON, default=list)
    worker: Mapped[str | None] = mapped_column(String(255))
    info: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class GpuLease(Base):
    __tablename__ = "gpu_lease"

    host: Mapped[str] = mapped_column(ForeignKey("host.name", ondelete="CASCADE"), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("job.id", ondelete="CASCADE"), index=True)
    acquired_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
