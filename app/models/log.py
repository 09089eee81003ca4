"""Job log lines, shipped by the worker in batches; (job_id, seq) makes a retried batch idempotent."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, UtcDateTime


class LogLine(Base):
    __tablename__ = "log_line"

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    ts: Mapped[datetime] = mapped_column(UtcDateTime)
    stream: Mapped[str] = mapped_column(String(8))
    text: Mapped[str] = mapped_column(Text)
