"""Params of the extract stage: a target's hidden states over a conversation data set."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.params.checkpoint import DEFAULT_SGLANG_VERSION, SGLANG_VERSION_PATTERN
from contract.params.common import DataParallelParams, HostPath

Dtype = Literal["bfloat16", "float16", "float32"]


class ExtractParams(DataParallelParams):
    target: HostPath = Field(description="target model folder (HF layout, safetensors)")
    data: HostPath = Field(
        description="JSONL of conversations: OpenAI `messages` or ShareGPT `conversations` per line"
    )
    output: HostPath = Field(description="extraction folder (speculators' offline layout + eyas manifest)")
    tokenizer: HostPath | None = Field(None, description="tokenizer folder (default: the target folder)")
    max_len: int = Field(2048, ge=16, le=262_144, description="tokens per sample, after the chat template")
    overlong: Literal["truncate", "drop"] = Field(
        "truncate", description="what to do with samples longer than max_len"
    )
    aux_layers: list[int] | None = Field(
        None,
        min_length=3,
        max_length=3,
        description="HF hidden-state indices of the 3 aux layers (default SGLang's [2, N//2, N-3])",
    )
    sglang_version: str = Field(
        DEFAULT_SGLANG_VERSION,
        pattern=SGLANG_VERSION_PATTERN,
        description="the SGLang release the draft will be served with: its target class decides which "
        "states are stored at the aux layers and the ids the draft carries",
    )
    batch_size: int = Field(8, ge=1, le=1024, description="samples per forward (batched by length)")
    dtype: Dtype = Field("bfloat16", description="dtype of the target and of the stored states")
    limit: int | None = Field(None, ge=1, description="stop after this many usable samples")
    writer_threads: int = Field(4, ge=1, le=64, description="threads writing safetensors files")
    queue_depth: int = Field(4, ge=1, le=64, description="batches waiting for the writers at most")
    durable_writes: bool = Field(
        True,
        description="flush each file to the disk before renaming it into place: crash-safe resume, and the "
        "disk writes while the GPU computes instead of all at the final sync",
    )
    disk_margin: float = Field(0.02, ge=0, le=1, description="extra free space required, as a fraction")
    disk_free_override_bytes: int | None = Field(
        None,
        ge=0,
        description="pretend the output filesystem has this many free bytes (tests and dry runs)",
    )
