"""Inference servers started by launch jobs."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, Text, Uuid
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
