"""Params of the eval stage: offline acceptance of a drafter against its target, before any server exists."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from contract.params.common import HostPath, PromptSource, StageParams


class EvalParams(StageParams):
    model: HostPath = Field(description="target model folder (HF layout)")
    draft: HostPath = Field(description="drafter folder (SGLang layout)")
    trust_remote_code: bool = Field(
        False,
        description="let transformers run the target folder's own Python code (config.json auto_map) when "
        "its text model is not an architecture transformers ships; the worker host must allow it "
        "(EYAS_ALLOW_REMOTE_CODE). Off: such a target is refused with a clear error, never a prompt",
    )
    depths: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=lambda: [16, 10, 5],
        min_length=1,
        max_length=16,
        description="chain depths to measure",
    )
    prompts: PromptSource | None = Field(
        None,
        description="prompt set: an absolute JSONL path (text, messages, conversations or MT-Bench turns a "
        "line) or a named set (default, mtbench); chat records are rendered with the target's chat template; "
        "default: eyas's built-in set",
    )
    max_prompts: int = Field(64, ge=1, le=100_000)
    max_new_tokens: int = Field(128, ge=1, le=32_768)
    ignore_eos: bool = Field(True, description="decode max_new_tokens every time (as benchmarks do)")
    check_outputs: bool = Field(True, description="also decode without speculation and compare outputs")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="auto: a GPU when the host has one (the job leases it), else the CPU; cuda: a GPU, "
        "refused on a host without",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16", "float64"] = Field(
        "auto", description="auto: bfloat16 on a GPU, float32 on the CPU"
    )

    def needs_gpus(self) -> bool:
        return self.device != "cpu"

    def gpus_optional(self) -> bool:
        # auto leases a GPU where the host has one (and runs on the CPU where it has none): "the GPU if the
        # job holds one" leased none, and left a pipeline's eval on the CPU for 5 minutes beside an idle GPU
        return self.device == "auto"
