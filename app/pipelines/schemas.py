"""Bodies of the pipelines API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.jobs.schemas import HOST_NAME_PATTERN, JobRead
from contract.params.common import HostPath


class Eagle3PipelineCreate(BaseModel):
    """Everything from hidden states to the benchmark table, as one request."""

    model_config = ConfigDict(extra="forbid")

    template: Literal["eagle3"] = "eagle3"
    target: HostPath = Field(description="target model folder (HF layout)")
    data: HostPath = Field(description="JSONL of conversations")
    workdir: HostPath = Field(
        description="outputs go to <workdir>/<pipeline id>/{hidden_states,train,sglang_draft}"
    )
    host: str | None = Field(None, pattern=HOST_NAME_PATTERN, description="GPU host for every step")
    extract: dict[str, Any] = Field(
        default_factory=dict, description="extract params besides target/data/output"
    )
    train: dict[str, Any] = Field(default_factory=dict, description="train params besides data/target/output")
    fix_keys: dict[str, Any] = Field(default_factory=dict, description="e.g. sglang_version")
    gpu_check: dict[str, Any] = Field(default_factory=dict)
    eval: dict[str, Any] | None = Field(default_factory=dict, description="offline acceptance; null skips it")
    benchmark: dict[str, Any] = Field(
        default_factory=dict, description="sweep params (depths default 16,10,5; launch: engine, tp_size…)"
    )


class PipelineRead(BaseModel):
    id: uuid.UUID
    template: str
    state: str
    host: str | None
    created_at: datetime
    retries: int
    spec: dict[str, Any]
    failed_step: str | None
    jobs: list[JobRead]
