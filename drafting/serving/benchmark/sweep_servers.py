"""The servers of a sweep: one spec per config, whether the baseline can stay up beside them, how the GPU's
memory is shared when it does, and waiting for a stopped server's memory to come back.

SGLang sizes its static pool (weights + KV cache) as mem_fraction_static × the GPU memory that is free
when it starts (model_runner: rest = free_after_load - free_at_start × (1 - fraction)). With the baseline
already holding its share, the speculative server's fraction is raised so both get the same absolute share,
from NVML readings where there are any.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.params.benchmark import BenchmarkParams, SpecConfig
from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.serving.launch.host_checks import free_port
from drafting.serving.launch.lifecycle import host_facts
from drafting.serving.launch.render import render_launch

DEFAULT_SHARED_FRACTION = (
    0.8  # both servers' static memory together, when launch.mem_fraction_static is unset
)
MAX_FRACTION = 0.9  # above this SGLang has no room left for activations and CUDA graphs
RUNTIME_HEADROOM = 0.05  # what a server holds beyond its static share (activations, graphs), when unmeasured
WEIGHTS_SHARE_LIMIT = 0.7  # the target's weights may fill at most this of a server's share: the rest is KV
GPU_RELEASE_TIMEOUT_S = 30.0
GPU_MEMORY_MARGIN_MIB = 1024.0
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class SweepLayout:
    interleaved: bool
    reason: str
    share: float | None  # each server's mem_fraction_static share of the GPU (SGLang, interleaved), else None
    baseline_port: int
    speculative_port: int

    def as_dict(self) -> dict[str, object]:
        return {
            "interleaved": self.interleaved,
            "interleave_reason": self.reason,
            "mem_fraction_per_server": self.share,
        }


def server_spec(
    launch: LaunchParams, config: SpecConfig | None, *, port: int, mem_fraction: float | None
) -> LaunchParams:
    """The launch spec of the baseline (config None: no draft) or of one config, ready to start."""
    update: dict[str, object] = {
        "draft": launch.draft if config else None,
        "depth": None,
        "num_steps": config.steps if config else None,
        "eagle_topk": config.topk if config else None,
        "num_draft_tokens": config.draft_tokens if config else None,
        "port": port,
        "dry_run": False,
    }
    if mem_fraction is not None:
        update["mem_fraction_static"] = round(mem_fraction, 4)
    return launch.model_copy(update=update)


def preflight(
    ctx: StageContext, params: BenchmarkParams, configs: Sequence[SpecConfig], layout: SweepLayout
) -> dict[str, Any]:
    """Render every server of the sweep before starting any: a config the engine cannot serve (a tree on
    the reference engine) fails now, not after the configs before it were measured. Returns the rendered
    launch's CUDA-graph facts."""
    assert params.launch is not None
    host = host_facts(ctx.gpus)
    problems: list[str] = []
    graphs: dict[str, Any] = {}
    for config in configs:
        spec = server_spec(params.launch, config, port=layout.speculative_port, mem_fraction=None)
        rendered = render_launch(spec, host=host, use_sglang_parser=False)
        graphs = rendered.cuda_graphs
        problems += [f"{config.label}: {f.code}: {f.message}" for f in rendered.errors]
    if problems:
        raise StageError(
            "sweep refused before starting anything: " + "; ".join(problems),
            reason=TerminationReason.LAUNCH_CHECK_FAILED,
            details={"problems": problems},
        )
    return graphs


def plan_layout(
    params: BenchmarkParams, engine: str, *, gpu_total_mib: float | None, weights_mib: float | None
) -> SweepLayout:
    """Interleave (the baseline up for the whole sweep) unless asked not to or the target cannot fit twice."""
    assert params.launch is not None
    launch = params.launch
    ports = {"baseline_port": launch.port, "speculative_port": _other_port(launch.port)}
    if not params.interleave:
        return SweepLayout(False, "interleave is false in the params", None, **ports)
    if engine != "sglang":
        reason = f"the {engine} engine runs on the CPU: the baseline stays up beside each config"
        return SweepLayout(True, reason, None, **ports)
    share = (launch.mem_fraction_static or DEFAULT_SHARED_FRACTION) / 2
    if gpu_total_mib is None or weights_mib is None:
        reason = f"GPU memory or weight size unknown; each server gets mem_fraction_static {share:.2f}"
        return SweepLayout(True, reason, share, **ports)
    per_gpu = weights_mib / launch.tp_size
    room = share * gpu_total_mib
    if per_gpu > WEIGHTS_SHARE_LIMIT * room:
        reason = (
            f"the target's weights ({per_gpu / 1024:.1f} GiB per GPU) leave too little of a half share "
            f"({room / 1024:.1f} GiB) for a KV cache: one server at a time, rounds measured back to back"
        )
        return SweepLayout(False, reason, None, **ports)
    reason = f"two servers share the GPU(s): mem_fraction_static {share:.2f} of GPU memory each"
    return SweepLayout(True, reason, share, **ports)


def _other_port(port: int) -> int:
    while (candidate := free_port()) == port:
        continue
    return candidate


def speculative_fraction(share: float, free_before_mib: float | None, free_now_mib: float | None) -> float:
    """The speculative server's mem_fraction_static for the same absolute share as the baseline's: the
    baseline took share × what was free before it; the fraction is of what is free now."""
    if free_before_mib and free_now_mib:
        fraction = share * free_before_mib / free_now_mib
    else:
        fraction = share / (1.0 - share - RUNTIME_HEADROOM)
    return min(fraction, MAX_FRACTION)


def weights_mib(folder: str | None) -> float | None:
    """The size of a model folder's weight files (MiB), None when it has none or cannot be read."""
    if folder is None:
        return None
    try:
        sizes = [f.stat().st_size for f in Path(folder).iterdir() if f.name.endswith(_WEIGHT_SUFFIXES)]
    except OSError:
        return None
    return sum(sizes) / 2**20 if sizes else None


def gpu_memory(gpus: Sequence[int]) -> dict[int, tuple[float, float]] | None:
    """(used, total) MiB per leased GPU from NVML; None without GPUs or readings."""
    if not gpus:
        return None
    from drafting.hostinfo import gpus as nvml

    inventory = nvml.inventory()
    readings = {g.index: (g.memory_used_mib, g.memory_total_mib) for g in inventory.gpus if g.index in gpus}
    return readings or None


def smallest_free_mib(readings: dict[int, tuple[float, float]] | None) -> float | None:
    return min(total - used for used, total in readings.values()) if readings else None


def smallest_total_mib(readings: dict[int, tuple[float, float]] | None) -> float | None:
    return min(total for _, total in readings.values()) if readings else None


def memory_back(
    before: dict[int, tuple[float, float]], now: dict[int, tuple[float, float]], margin_mib: float
) -> list[str]:
    """GPUs still holding more than `margin_mib` over what they used before a server started."""
    return [
        f"GPU {index} uses {now[index][0]:.0f} MiB, {before_used:.0f} MiB before the server started"
        for index, (before_used, _) in before.items()
        if index in now and now[index][0] > before_used + margin_mib
    ]


def wait_memory_back(before: dict[int, tuple[float, float]] | None) -> None:
    """After a speculative server stops, beside a baseline still up: wait for its memory to come back."""
    if before is None:
        return
    deadline = time.monotonic() + GPU_RELEASE_TIMEOUT_S
    while True:
        problems = memory_back(before, gpu_memory(list(before)) or {}, GPU_MEMORY_MARGIN_MIB)
        if not problems:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(1.0)
    raise StageError(
        "GPU memory not released after stopping a server: " + "; ".join(problems),
        reason=TerminationReason.GPU_NOT_CLEAN,
        details={"problems": problems},
    )


def wait_gpus_clean(ctx: StageContext) -> None:
    """No server of the sweep left: the GPU gate, retried while the driver releases memory."""
    if not ctx.gpus:
        return
    from drafting.hostinfo import gate

    deadline = time.monotonic() + GPU_RELEASE_TIMEOUT_S
    while True:
        verdict = gate.check(list(ctx.gpus))
        if verdict.clean:
            return
        if time.monotonic() > deadline:
            raise StageError(
                "GPUs not clean after stopping the server: " + "; ".join(verdict.problems),
                reason=TerminationReason.GPU_NOT_CLEAN,
                details=verdict.to_dict(),
            )
        time.sleep(1.0)
