"""Params of the benchmark stage: one server, or a depth sweep against a no-speculation baseline."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from contract.params.common import HostPath, StageParams
from contract.params.launch import LaunchParams

_SERVER_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:\d{1,5})?/?$")
Depth = Annotated[int, Field(ge=1, le=64)]


class BenchmarkParams(StageParams):
    mode: Literal["single", "sweep"] = Field(
        "single", description="single: one server; sweep: launch per depth"
    )
    url: str | None = Field(None, description="single mode: a ready server speaking SGLang's API")
    launch: LaunchParams | None = Field(
        None, description="sweep mode: the server spec (depth comes from depths)"
    )
    depths: list[Depth] = Field(default_factory=lambda: [16, 10, 5], min_length=1, max_length=16)
    prompts: HostPath | None = Field(None, description="JSONL prompt set; default: eyas's built-in set")
    max_prompts: int = Field(64, ge=1, le=100_000)
    max_new_tokens: int = Field(128, ge=1, le=32_768)
    concurrency: int = Field(1, ge=1, le=1024)
    warmup_requests: int = Field(2, ge=0, le=1000)
    send_as: Literal["text", "input_ids"] = Field(
        "text", description="input_ids: the prompt's UTF-8 bytes as ids, for targets without a tokenizer"
    )
    timing: Literal["auto", "stream", "e2e"] = Field(
        "auto", description="stream: TTFT and ITL from streamed chunks; auto: stream when the server can"
    )
    ignore_eos: bool = Field(True, description="decode max_new_tokens for every request")
    request_timeout_s: float = Field(600, gt=0, le=86_400)
    chosen_depth: Depth | None = Field(
        None, description="the depth the release gate judges (default: fastest)"
    )
    speedup_threshold: float = Field(1.0, ge=0, description="deployable only above this speedup")
    smoke: bool = Field(
        True,
        description="sweep: a load smoke test on each server before measuring (greedy requests; fails on a "
        "dead server, acceptance ~1.0, or outputs that leave the baseline's beyond a numerical near-tie)",
    )
    smoke_min_accept_length: float = Field(
        1.05, ge=1.0, le=64, description="sweep smoke: acceptance under this means the draft is not working"
    )

    @model_validator(mode="after")
    def _mode_fields(self) -> BenchmarkParams:
        if self.mode == "single":
            if self.url is None or not _SERVER_URL.match(self.url):
                raise ValueError("single mode needs url, e.g. http://127.0.0.1:30000")
            return self
        if self.launch is None or self.launch.draft is None:
            raise ValueError("sweep mode needs launch with a draft")
        launch = self.launch
        if launch.depth is not None or launch.num_steps or launch.eagle_topk or launch.num_draft_tokens:
            raise ValueError(
                "in sweep mode the depths come from `depths`; leave launch.depth and steps unset"
            )
        if self.chosen_depth is not None and self.chosen_depth not in self.depths:
            raise ValueError(f"chosen_depth {self.chosen_depth} is not one of depths {self.depths}")
        return self

    def host_paths(self) -> list[str]:
        nested = self.launch.host_paths() if self.launch is not None else []
        return super().host_paths() + nested

    def needs_gpus(self) -> bool:
        return self.mode == "sweep" and self.launch is not None and self.launch.needs_gpus()

    def gpus_optional(self) -> bool:
        return self.launch is not None and self.launch.gpus_optional()

    def gpus_needed(self) -> int:
        return self.launch.gpus_needed() if self.needs_gpus() and self.launch is not None else 0
