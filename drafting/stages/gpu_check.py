"""gpu_check: NVML inventory, a clean/dirty verdict per GPU and /dev/shm."""

from __future__ import annotations

import json
from typing import Any

from contract.params.gpu_check import GpuCheckParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.hostinfo import gate


def run(ctx: StageContext, params: GpuCheckParams) -> dict[str, Any]:
    indices = params.gpus if params.gpus is not None else (list(ctx.gpus) or None)
    thresholds = gate.GateThresholds(
        idle_baseline_mib=params.idle_baseline_mib,
        memory_margin_mib=params.memory_margin_mib,
        min_shm_free_mib=params.min_shm_free_mib,
    )
    verdict = gate.check(indices, thresholds)
    _log_verdict(ctx, verdict)
    result = verdict.to_dict()
    result["gpu_count"] = len(verdict.gpus)
    if verdict.nvml_error and not verdict.gpus and not params.gpus:
        ctx.log(f"no GPUs on this host: {verdict.nvml_error}")
        result["verdict"] = "no_gpus"
        return result
    result["verdict"] = "clean" if verdict.clean else "dirty"
    if not verdict.clean and params.fail_if_dirty:
        raise StageError(
            "GPU check failed: " + "; ".join(verdict.problems),
            reason=TerminationReason.GPU_NOT_CLEAN,
            details=result,
        )
    return result


def _log_verdict(ctx: StageContext, verdict: gate.GateVerdict) -> None:
    for gpu in verdict.gpus:
        holders = ", ".join(str(p["pid"]) for p in gpu["processes"]) or "none"
        ctx.log(
            f"GPU {gpu['index']} {gpu['name']} {gpu['uuid']}: {gpu['memory_used_mib']:.0f}/"
            f"{gpu['memory_total_mib']:.0f} MiB used, util {gpu['utilization_pct']}%, "
            f"power {gpu['power_w']} W, temp {gpu['temperature_c']} C, processes: {holders}"
        )
    ctx.log(f"/dev/shm: {json.dumps({k: v for k, v in verdict.shm.items() if k != 'segments'})}")
    for problem in verdict.problems:
        ctx.log(f"DIRTY: {problem}", stream="stderr")
