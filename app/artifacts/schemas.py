"""Bodies of the artifacts API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class ArtifactRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    job_id: uuid.UUID
    kind: str
    host: str | None
    path: str
    bytes: int | None
    meta: dict[str, Any]
    parent_ids: list[str]
    created_at: datetime


class ArtifactPage(BaseModel):
    items: list[ArtifactRead]
    next_cursor: str | None


class ArtifactLineage(ArtifactRead):
    ancestors: list[ArtifactRead]
