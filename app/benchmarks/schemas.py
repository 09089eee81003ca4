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


class BenchmarkPage(BaseModel):
    items: list[BenchmarkRead]
    next_cursor: str | None


class ComparedBenchmark(BaseModel):
    id: uuid.UUID
    job_id: uuid.UUID
    created_at: datetime
    draft: str | None
    target: str | None
    url: str | None


class ComparedConfig(BaseModel):
    config: str
    a_accept_len: float
    b_accept_len: float
    difference: float
    ratio: float | None
    ci_low: float
    ci_high: float
    a_ahead_prompts: int
    b_ahead_prompts: int
    tied_prompts: int
    verdict: str


class BenchmarkComparison(BaseModel):
    """Two drafts on the same requests: per config, the pooled accept lengths, `a − b` with its paired
    bootstrap interval over prompts, and how many prompts each draft won."""

    a: ComparedBenchmark
    b: ComparedBenchmark
    requests_digest: str
    prompts: int
    confidence: float
    interval: str
    configs: list[ComparedConfig]
    only_in_a: list[str]
    only_in_b: list[str]
    notes: list[str]
