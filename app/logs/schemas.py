"""Bodies of the logs API."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class LogLineRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    seq: int
    ts: datetime
    stream: str
    text: str


class LogPage(BaseModel):
    lines: list[LogLineRead]
    next_cursor: int
    job_state: str
    complete: bool  # the job has ended and every line up to next_cursor is delivered
