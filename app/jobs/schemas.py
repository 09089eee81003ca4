"""Request and response bodies of the jobs API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator

from app.hosts.schemas import HOST_NAME_PATTERN
from app.jobs.states import TERMINAL, JobState


class JobCreate(BaseModel):
    # strict: JSON's types as written (`"gpus": true` is not 1, `"timeout_s": "60"` not a number)
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str = Field(min_length=1, max_length=32, pattern=r"^[a-z_]+$")
    params: dict[str, Any] = Field(default_factory=dict)
    host: str | None = Field(None, pattern=HOST_NAME_PATTERN)
    gpus: int | None = Field(
        None, ge=0, le=64, description="GPUs the job holds (default: 1 if the stage needs any)"
    )
    depends_on: list[Annotated[uuid.UUID, Strict(False)]] = Field(default_factory=list, max_length=64)
    max_attempts: int = Field(1, ge=1, le=10)
    timeout_s: float | None = Field(None, gt=0, le=30 * 24 * 3600)

    @field_validator("depends_on")
    @classmethod
    def _unique(cls, value: list[uuid.UUID]) -> list[uuid.UUID]:
        if len(set(value)) != len(value):
            raise ValueError("depends_on lists a job twice")
        return value


class JobRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    kind: str
    params: dict[str, Any]
    state: JobState
    terminal: bool = False
    host: str | None
    gpus_requested: int
    gpu_indices: list[int] | None
    max_attempts: int
    attempt: int
    timeout_s: float | None
    pipeline_id: uuid.UUID | None
    pipeline_step: str | None
    created_at: datetime
    updated_at: datetime
    queued_at: datetime | None
    started_at: datetime | None
    running_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    cancel_requested_at: datetime | None
    progress: float | None
    progress_message: str | None
    termination_reason: str | None
    message: str | None
    exit_code: int | None
    result: dict[str, Any] | None
    pid: int | None
    worker: str | None
    version: int

    @classmethod
    def of(cls, job: Any) -> JobRead:
        read = cls.model_validate(job)
        read.terminal = read.state in TERMINAL
        return read


class JobPage(BaseModel):
    items: list[JobRead]
    next_cursor: str | None


class JobEventRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    from_state: str | None
    to_state: str
    reason: str | None
    message: str | None
    at: datetime


class MetricRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    step: int
    value: float
    at: datetime
