"""Bodies of the logs API."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

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


@dataclass(frozen=True)
class LogQuery:
    """What a log page request asks for; shared by every route that serves a job's log in pages."""

    cursor: int
    limit: int
    tail: int | None
    stream: Literal["stdout", "stderr"] | None
    format: Literal["json", "text"]
