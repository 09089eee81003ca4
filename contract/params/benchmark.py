"""Params of the benchmark stage: one server, or a sweep of speculative configurations against a
no-speculation baseline, measured in repeated, interleaved rounds."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.params.common import PromptSource, StageParams
from contract.params.launch import LaunchParams

_SERVER_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:\d{1,5})?/?$")
Depth = Annotated[int, Field(ge=1, le=64)]
DEFAULT_DEPTHS = (16, 10, 5)


def tree_candidates(steps: int, topk: int) -> int:
    """Draft tokens an EAGLE tree of `steps` × `topk` proposes: topk at the first step, topk² after it.
    SGLang takes the best num_draft_tokens - 1 of them (torch.topk in organize_draft_results) without
    checking the count first, so a larger value fails at run time, not at start-up."""
    return topk + (steps - 1) * topk * topk


class SpecConfig(BaseModel):
    """One speculative shape: SGLang's --speculative-num-steps, --speculative-eagle-topk and
    --speculative-num-draft-tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # as StageParams: JSON types

    steps: int = Field(ge=1, le=64, description="--speculative-num-steps: draft forward passes per step")
    topk: int = Field(ge=1, le=64, description="--speculative-eagle-topk: 1 = a chain, more = a tree")
    draft_tokens: int = Field(ge=2, le=1024, description="--speculative-num-draft-tokens: tokens verified")

    @model_validator(mode="after")
    def _sglang_rules(self) -> SpecConfig:
        if self.topk == 1 and self.draft_tokens != self.steps + 1:
            raise ValueError(
                f"config {self.label}: a chain (topk 1) verifies steps + 1 = {self.steps + 1} draft tokens; "
                f"SGLang would silently change {self.draft_tokens} to {self.steps + 1}"
            )
        candidates = tree_candidates(self.steps, self.topk)
        if self.topk > 1 and self.draft_tokens - 1 > candidates:
            raise ValueError(
                f"config {self.label}: a tree of {self.steps} steps × topk {self.topk} proposes at most "
                f"{candidates} tokens, so draft_tokens can be at most {candidates + 1}; SGLang does not "
                "check this and fails while serving"
            )
        return self

    @property
    def label(self) -> str:
        """How rows and the gate name it: "steps,topk,draft_tokens", e.g. "5,1,6"."""
        return f"{self.steps},{self.topk},{self.draft_tokens}"

    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    @classmethod
    def chain(cls, depth: int) -> SpecConfig:
        return cls(steps=depth, topk=1, draft_tokens=depth + 1)


class BenchmarkParams(StageParams):
    mode: Literal["single", "sweep", "profile"] = Field(
        "single",
        description="single: one server; sweep: a baseline and one server per config; profile: the same "
        "servers, one short wave each per concurrency (no rounds, no gate): the cost profile and the "
        "speedup it predicts from accept_lengths, before any sweep",
    )
    url: str | None = Field(None, description="single mode: a ready server speaking SGLang's API")
    launch: LaunchParams | None = Field(
        None, description="sweep mode: the server spec (the speculative shape comes from configs/depths)"
    )
    configs: list[SpecConfig] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description="sweep: the speculative configurations {steps, topk, draft_tokens} to measure",
    )
    depths: list[Depth] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description="sweep: shorthand for chain configs (depth d = steps d, topk 1, d + 1 draft tokens); "
        "default 16, 10, 5 when neither configs nor depths is given",
    )
    repeats: int = Field(
        5,
        ge=1,
        le=100,
        description="sweep: measured rounds per config and concurrency; each round pairs every request's "
        "speculative run with the same request's baseline run, and the speedup's interval resamples requests",
    )
    interleave: bool = Field(
        True,
        description="sweep: keep the baseline server up beside each speculative one and alternate their "
        "batches (B S, S B, …) so host drift hits both alike; false (or no room for two servers) measures "
        "each server's rounds back to back",
    )
    prompts: PromptSource | None = Field(
        None, description="JSONL prompt set (an absolute path) or a named set (mtbench, default)"
    )
    max_prompts: int = Field(64, ge=1, le=100_000)
    max_new_tokens: int = Field(128, ge=1, le=32_768)
    concurrency: int = Field(
        1,
        ge=1,
        le=1024,
        description="requests in flight; in a sweep, the concurrency the release gate judges",
    )
    concurrencies: list[Annotated[int, Field(ge=1, le=1024)]] | None = Field(
        None,
        min_length=1,
        max_length=8,
        description="sweep: every config measured at each of these numbers of requests in flight (e.g. "
        "[1, 8, 32]), to show where speculation stops paying; default [concurrency], which must be among "
        "them",
    )
    max_speedup_half_width: float = Field(
        0.05,
        gt=0,
        le=10,
        description="sweep: a judged speedup whose 95 % interval holds the threshold is `inconclusive` (no "
        "verdict, with how many more requests would decide) while it reaches further than this either side "
        "(half its width, in speedup units); an interval wholly on one side of the threshold decides",
    )
    accept_lengths: dict[Depth, Annotated[float, Field(ge=1.0, le=65.0)]] | None = Field(
        None,
        description="sweep/profile: acceptance length by chain depth that the speedup is predicted from "
        "(train's held-out estimate, `held_out/sim_accept_len_d{N}`), reported beside the measurement",
    )
    profile: bool = Field(
        True,
        description="sweep: a short cost profile of each server before it is measured (one wave of "
        "requests per concurrency: prefill, decode step or verify cycle), the speedup predicted from it",
    )
    warmup_requests: int = Field(2, ge=0, le=1000)
    send_as: Literal["text", "input_ids"] = Field(
        "text", description="input_ids: the prompt's UTF-8 bytes as ids, for targets without a tokenizer"
    )
    timing: Literal["auto", "stream", "e2e"] = Field(
        "auto", description="stream: TTFT and ITL from streamed chunks; auto: stream when the server can"
    )
    ignore_eos: bool = Field(True, description="decode max_new_tokens for every request")
    request_timeout_s: float = Field(600, gt=0, le=86_400)
    chosen_config: SpecConfig | None = Field(
        None, description="the config the release gate judges (default: the highest speedup lower bound)"
    )
    chosen_depth: Depth | None = Field(None, description="shorthand for chosen_config of a chain")
    speedup_threshold: float = Field(
        1.0, ge=0, description="deployable only when the speedup's 95 % lower bound is above this"
    )
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
        if self.configs is not None and self.depths is not None:
            raise ValueError("give configs or depths (shorthand for chain configs), not both")
        if self.chosen_config is not None and self.chosen_depth is not None:
            raise ValueError("give chosen_config or chosen_depth (shorthand for a chain), not both")
        if self.mode == "single":
            if self.url is None or not _SERVER_URL.match(self.url):
                raise ValueError("single mode needs url, e.g. http://127.0.0.1:30000")
            return self
        if self.launch is None or self.launch.draft is None:
            raise ValueError(f"{self.mode} mode needs launch with a draft")
        levels = self.sweep_concurrencies()
        if len(set(levels)) != len(levels):
            raise ValueError(f"concurrencies repeat: {levels}")
        if self.concurrency not in levels:
            raise ValueError(
                f"the gate judges at concurrency {self.concurrency}, which is not among concurrencies "
                f"{levels}: add it, or set concurrency to one of them"
            )
        launch = self.launch
        if launch.depth is not None or launch.num_steps or launch.eagle_topk or launch.num_draft_tokens:
            raise ValueError(
                "in sweep mode the speculative shape comes from `configs` (or `depths`); leave launch.depth "
                "and steps unset"
            )
        configs = self.sweep_configs()
        labels = [config.label for config in configs]
        if len(set(labels)) != len(labels):
            raise ValueError(f"configs repeat: {labels}")
        chosen = self.chosen()
        if chosen is not None and chosen not in configs:
            raise ValueError(f"the chosen config {chosen.label} is not one of the configs {labels}")
        trees = [config.label for config in configs if not config.is_chain]
        if launch.engine == "reference" and trees:
            raise ValueError(f"the reference engine drafts chains only (topk 1); {trees} are trees")
        return self

    def sweep_configs(self) -> list[SpecConfig]:
        """The configurations a sweep measures, in order: configs, else depths as chains."""
        if self.configs is not None:
            return list(self.configs)
        return [SpecConfig.chain(depth) for depth in self.depths or DEFAULT_DEPTHS]

    def sweep_concurrencies(self) -> list[int]:
        """The concurrencies each config is measured at, in order: concurrencies, else [concurrency]."""
        return list(self.concurrencies) if self.concurrencies is not None else [self.concurrency]

    def chosen(self) -> SpecConfig | None:
        if self.chosen_depth is not None:
            return SpecConfig.chain(self.chosen_depth)
        return self.chosen_config

    def host_paths(self) -> list[str]:
        nested = self.launch.host_paths() if self.launch is not None else []
        return super().host_paths() + nested

    def needs_gpus(self) -> bool:
        return self.mode != "single" and self.launch is not None and self.launch.needs_gpus()

    def gpus_optional(self) -> bool:
        return self.launch is not None and self.launch.gpus_optional()

    def gpus_needed(self) -> int:
        return self.launch.gpus_needed() if self.needs_gpus() and self.launch is not None else 0
