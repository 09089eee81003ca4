"""The GPU gate on a real GPU: the gpu_check stage on GPU 0 while idle (clean), while another process holds
2 GiB on it (GPU_NOT_CLEAN, naming that process's pid and its memory), and once that process is gone (clean
again). NVML reads here; only the holder makes a CUDA context."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from contract.params.gpu_check import GpuCheckParams
from contract.reasons import TerminationReason
from drafting import proc
from drafting.context import RecordingSink, StageContext, StageError
from drafting.hostinfo import gate
from drafting.stages import gpu_check

HOLD = (
    "import torch, time; x = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda');"
    "print('held', flush=True); time.sleep(300)"
)
SETTLE_S = 60.0  # a holder's CUDA start, or the driver freeing an ended process's memory


def run_stage(work: Path) -> dict[str, Any]:
    ctx = StageContext(work_dir=work, sink=RecordingSink())
    return gpu_check.run(ctx, GpuCheckParams(gpus=[0]))


def wait_for(clean: bool) -> None:
    deadline = time.monotonic() + SETTLE_S
    while gate.check([0]).clean != clean:
        if time.monotonic() > deadline:
            pytest.fail(f"GPU 0 not {'clean' if clean else 'held'} after {SETTLE_S:.0f} s: {gate.check([0])}")
        time.sleep(0.5)


def test_the_gate_names_the_process_holding_the_gpu_and_clears_once_it_ends(tmp_path: Path) -> None:
    idle = run_stage(tmp_path)
    assert idle["verdict"] == "clean", idle["problems"]
    assert idle["gpus"][0]["processes"] == []
    holder = proc.spawn([sys.executable, "-c", HOLD], output=tmp_path / "holder.log")
    try:
        wait_for(clean=False)
        with pytest.raises(StageError) as held:
            run_stage(tmp_path)
    finally:
        proc.terminate_group(holder.pid, grace_s=5, popen=holder)
    assert held.value.reason == TerminationReason.GPU_NOT_CLEAN
    assert f"held by pid {holder.pid}" in held.value.message
    assert "MiB" in held.value.message
    assert held.value.details["verdict"] == "dirty"
    wait_for(clean=True)
    after = run_stage(tmp_path)
    assert after["verdict"] == "clean", after["problems"]
