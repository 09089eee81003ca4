"""The GPU gate on a real GPU host (prints JSON): the gpu_check stage on an idle GPU, then with a process
holding 2 GiB on it (dirty: its pid and memory are named), then after that process is gone (clean again).

    python bench/gpu/gpu_check_run.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from contract.params.gpu_check import GpuCheckParams
from drafting import proc
from drafting.hostinfo import gate
from drafting.stages import gpu_check
from drafting.stages.base import RecordingSink, StageContext, StageError

HOLD = (
    "import torch, time; x = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda');"
    "print('held', flush=True); time.sleep(120)"
)


def run_stage() -> dict[str, object]:
    ctx = StageContext(work_dir=Path(tempfile.mkdtemp()), sink=RecordingSink())
    try:
        return {"outcome": "succeeded", **gpu_check.run(ctx, GpuCheckParams())}
    except StageError as exc:
        return {"outcome": "failed", "reason": str(exc.reason), "message": exc.message}


def main() -> None:
    out: dict[str, object] = {"idle": run_stage()}
    holder = proc.spawn([sys.executable, "-c", HOLD])
    try:
        deadline = time.monotonic() + 60
        verdict = gate.check([0])
        while verdict.clean and time.monotonic() < deadline:
            time.sleep(0.5)
            verdict = gate.check([0])
        out["held_by_another_process"] = {"holder_pid": holder.pid, **run_stage()}
    finally:
        proc.terminate_group(holder.pid, grace_s=5, popen=holder)
    time.sleep(2)
    out["after_holder_ended"] = run_stage()
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
