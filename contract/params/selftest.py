"""Params of the selftest stage: a small, harmless job for smoke tests and the README walkthrough."""

from __future__ import annotations

from pydantic import Field

from contract.params.common import OutputPath, StageParams


class SelftestParams(StageParams):
    lines: int = Field(3, ge=0, le=1_000_000, description="lines to print to stdout")
    line_bytes: int = Field(0, ge=0, le=16 * 1024 * 1024, description="pad each line to this many bytes")
    stderr_lines: int = Field(0, ge=0, le=1_000_000, description="lines to print to stderr")
    stamp: bool = Field(False, description="append each line's wall-clock write time (latency benchmarks)")
    lines_per_second: float = Field(0, ge=0, description="pace the lines (0 = as fast as possible)")
    sleep_s: float = Field(0, ge=0, le=86_400, description="sleep after printing")
    exit_code: int = Field(0, ge=0, le=255, description="exit with this code")
    marker_file: OutputPath | None = Field(None, description="append one line per run here (side effect)")
    hold_gpus: bool = Field(False, description="hold the job's GPUs (for lease tests)")

    def needs_gpus(self) -> bool:
        return self.hold_gpus
