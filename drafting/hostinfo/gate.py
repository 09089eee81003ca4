"""The GPU gate: is a set of GPUs clean enough to start (or hand back after) a GPU job?

Clean = no process holds the GPU and its used memory is within a margin of the idle baseline (an idle
H200 reports ~615 MiB used with no process at all, so "0 MiB" would never be clean), and /dev/shm has room.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drafting.hostinfo import gpus as nvml
from drafting.hostinfo import shm


@dataclass(frozen=True)
class GateThresholds:
    idle_baseline_mib: float = 700.0
    memory_margin_mib: float = 1024.0
    min_shm_free_mib: float = 1024.0


@dataclass
class GateVerdict:
    clean: bool
    problems: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    shm: dict[str, Any] = field(default_factory=dict)
    nvml_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "problems": self.problems,
            "gpus": self.gpus,
            "shm": self.shm,
            "nvml_error": self.nvml_error,
        }


def check(
    indices: Sequence[int] | None,
    thresholds: GateThresholds = GateThresholds(),
    *,
    shm_path: Path = Path("/dev/shm"),
    ignore_pids: Sequence[int] = (),
) -> GateVerdict:
    """Check the given GPU indices (None = all) and /dev/shm."""
    inventory = nvml.inventory()
    report = shm.scan(shm_path)
    verdict = GateVerdict(clean=True, shm=report.to_dict(), nvml_error=inventory.error)
    chosen = [g for g in inventory.gpus if indices is None or g.index in indices]
    missing = sorted(set(indices or ()) - {g.index for g in inventory.gpus})
    if missing:
        verdict.problems.append(
            f"GPU(s) {missing} not found" + (f": {inventory.error}" if inventory.error else "")
        )
    for gpu in chosen:
        verdict.gpus.append(gpu.to_dict())
        verdict.problems.extend(_gpu_problems(gpu, thresholds, set(ignore_pids)))
    if report.total_mib and report.free_mib < thresholds.min_shm_free_mib:
        verdict.problems.append(
            f"{report.path} has {report.free_mib:.0f} MiB free (< {thresholds.min_shm_free_mib:.0f} MiB); "
            f"{len(report.stale)} stale segment(s) hold {report.to_dict()['stale_mib']:.0f} MiB"
        )
    verdict.clean = not verdict.problems
    return verdict


def _gpu_problems(gpu: nvml.GpuInfo, thresholds: GateThresholds, ignore: set[int]) -> list[str]:
    problems = []
    holders = [p for p in gpu.processes if p.pid not in ignore]
    if holders:
        problems.append(f"GPU {gpu.index} is held by {nvml.listing(holders)}")
    limit = thresholds.idle_baseline_mib + thresholds.memory_margin_mib
    if gpu.memory_used_mib > limit:
        problems.append(
            f"GPU {gpu.index} has {gpu.memory_used_mib:.0f} MiB used (idle baseline "
            f"{thresholds.idle_baseline_mib:.0f} + margin {thresholds.memory_margin_mib:.0f} MiB)"
        )
    return problems
