"""Params of the extract stage: a target's hidden states over a conversation data set."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contract.params.checkpoint import DEFAULT_SGLANG_VERSION, SGLANG_VERSION_PATTERN
from contract.params.common import DataParallelParams, HostPath, OutputPath

Dtype = Literal["bfloat16", "float16", "float32"]
# SGLang 0.5.14's attention kernels for CUDA GPUs (server_args.py ATTENTION_BACKEND_CHOICES, less those of
# other platforms and the deprecated aliases).
SGLangAttention = Literal[
    "triton", "torch_native", "flex_attention", "dsa", "dsv4", "cutlass_mla", "fa3", "fa4", "flashinfer",
    "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "dual_chunk_flash_attn",
]  # fmt: skip


class ExtractParams(DataParallelParams):
    target: HostPath = Field(description="target model folder (HF layout, safetensors)")
    backend: Literal["hf", "sglang"] = Field(
        "hf",
        description="what runs the target: hf (transformers, one whole copy per GPU, data parallel) or "
        "sglang (SGLang's own model classes, one tensor-parallel group of tp_size GPUs: for targets too big "
        "for one GPU, and states captured by the code that will serve the draft)",
    )
    tp_size: int = Field(
        1,
        ge=1,
        le=64,
        description="sglang backend: GPUs the target is split over (tensor parallel); the job leases exactly "
        "this many. The hf backend keeps 1",
    )
    attention_backend: SGLangAttention | None = Field(
        None,
        description="sglang backend: SGLang's attention kernels (default SGLang's choice for the GPU; triton "
        "where flashinfer is not installed)",
    )
    mem_fraction_static: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="sglang backend: fraction of GPU memory for weights and KV cache (default SGLang's); "
        "lower it when long samples run out of memory for activations",
    )
    data: HostPath = Field(
        description="JSONL of conversations: OpenAI `messages` or ShareGPT `conversations` per line"
    )
    output: OutputPath = Field(description="extraction folder (speculators' offline layout + eyas manifest)")
    tokenizer: HostPath | None = Field(None, description="tokenizer folder (default: the target folder)")
    trust_remote_code: bool = Field(
        False,
        description="let transformers run the target folder's own Python code (config.json auto_map) when "
        "its text model is not an architecture transformers ships; the worker host must allow it "
        "(EYAS_ALLOW_REMOTE_CODE). Off: such a target is refused with a clear error, never a prompt",
    )
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

    @model_validator(mode="after")
    def _backend_fits(self) -> ExtractParams:
        if self.backend == "hf":
            sglang_only = {
                "tp_size": self.tp_size != 1,
                "attention_backend": self.attention_backend is not None,
            }
            sglang_only["mem_fraction_static"] = self.mem_fraction_static is not None
            named = [name for name, given in sglang_only.items() if given]
            if named:
                raise ValueError(
                    f"{', '.join(named)} only apply to backend sglang: the hf backend runs one whole copy of "
                    "the target per GPU"
                )
            return self
        if self.device != "cuda":
            raise ValueError("backend sglang runs SGLang's model classes on CUDA GPUs: device must be cuda")
        if self.sglang_version.lstrip("v").split(".post")[0] != DEFAULT_SGLANG_VERSION:
            # The capture runs the installed release's classes, which the stage checks is this one: states
            # stored for another release's capture rule would not be what they claim.
            raise ValueError(
                f"backend sglang captures with SGLang {DEFAULT_SGLANG_VERSION}, the release whose in-process "
                f"API it calls; sglang_version {self.sglang_version} would record another release's capture"
            )
        if self.ranks is not None and self.ranks != self.tp_size:
            raise ValueError(
                f"ranks is {self.ranks} but tp_size is {self.tp_size}: backend sglang runs one rank per GPU "
                "of its tensor-parallel group (leave ranks unset)"
            )
        return self

    def gpus_needed(self) -> int:
        return self.tp_size if self.backend == "sglang" else super().gpus_needed()

    def gpus_conflict(self, gpus: int) -> str | None:
        if self.backend == "sglang" and gpus != self.tp_size:
            # SGLang sets up its model parallelism over a world of exactly tp_size processes
            # (distributed/parallel_state.py initialize_model_parallel): one group, no data-parallel replicas.
            return (
                f"tp_size is {self.tp_size} but the job asks for {gpus} GPU(s): backend sglang splits the "
                "target over exactly tp_size GPUs"
            )
        return super().gpus_conflict(gpus)
