"""Bodies of the servers API."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict


class ServerRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    job_id: uuid.UUID
    host: str | None
    engine: str | None
    state: str
    url: str | None
    argv: list[str] | None
    pid: int | None
    gpus: list[int] | None
    draft: str | None
    last_accept_len: float | None
    message: str | None
    started_at: datetime
    ready_at: datetime | None
    stopped_at: datetime | None


class ServerPage(BaseModel):
    items: list[ServerRead]
    next_cursor: str | None
