"""Bodies of the benchmarks API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class BenchmarkRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    job_id: uuid.UUID
    server_id: uuid.UUID | None
    deployable: bool | None
    summary: dict[str, Any]
    created_at: datetime
