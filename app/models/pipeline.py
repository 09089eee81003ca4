"""Pipelines: one request that becomes a chain of dependent jobs."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, UtcDateTime, utcnow


class Pipeline(Base):
    __tablename__ = "pipeline"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    template: Mapped[str] = mapped_column(String(32))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    host: Mapped[str | None] = mapped_column(String(128))
    created_by: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    retries: Mapped[int] = mapped_column(default=0)
    # Where the steps write (<workdir>/<id> when null). A retry that changes params moves it to a fresh
    # folder, so no step resumes work made with other params; later plain retries resume there.
    run_root: Mapped[str | None] = mapped_column(String(1024))
