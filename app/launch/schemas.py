"""Bodies of the launch-render API."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.hosts.schemas import HOST_NAME_PATTERN


class RenderRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON's types as written

    spec: dict[str, Any] = Field(description="a launch spec (the params of a `launch` job)")
    host: str | None = Field(None, pattern=HOST_NAME_PATTERN, description="the GPU host whose checks to run")
    timeout: float = Field(60, gt=0, le=300, description="seconds to wait for the host's answer")


class RenderResult(BaseModel):
    job_id: uuid.UUID
    state: str
    ok: bool
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    engine: str | None = None
    findings: list[dict[str, Any]] = Field(default_factory=list)
    message: str | None = None
