"""Bodies of the hosts API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel

# The name a worker registers its host under; every API field or path that names a host matches it.
HOST_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class LeaseRead(BaseModel):
    gpu_index: int
    job_id: uuid.UUID
    acquired_at: datetime


class HostRead(BaseModel):
    name: str
    online: bool
    heartbeat_at: datetime
    registered_at: datetime
    worker: str | None
    gpu_count: int
    gpus: list[dict[str, Any]]
    gpu_error: str | None
    shm: dict[str, Any] | None
    allowed_roots: list[str]
    info: dict[str, Any] | None
    leases: list[LeaseRead]
