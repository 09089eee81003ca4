"""Params of the gpu_check stage."""

from __future__ import annotations

from pydantic import Field

from contract.params.common import StageParams


class GpuCheckParams(StageParams):
    gpus: list[int] | None = Field(None, description="GPU indices to check (default: all)")
    memory_margin_mib: int = Field(
        1024, ge=0, description="a GPU is clean when its used memory is within this of the idle baseline"
    )
    idle_baseline_mib: int = Field(
        700, ge=0, description="memory NVML reports used on an idle GPU (an H200 shows ~615 MiB)"
    )
    min_shm_free_mib: int = Field(1024, ge=0, description="fail when /dev/shm has less free space")
    fail_if_dirty: bool = Field(True, description="fail the job when a GPU or /dev/shm is dirty")
