"""The GPU gate and /dev/shm scan on this machine (no NVIDIA driver: the no-NVML path runs for real)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from contract.params.gpu_check import GpuCheckParams
from contract.reasons import TerminationReason
from drafting.context import RecordingSink, StageContext, out_of_memory
from drafting.hostinfo import gate, gpus, shm
from drafting.stages import gpu_check


def test_inventory_without_nvml_reports_zero_gpus_and_the_reason() -> None:
    inventory = gpus.inventory()
    assert inventory.gpus == []
    assert inventory.error is not None
    assert "NVML" in inventory.error or "driver" in inventory.error


def test_gate_asking_for_a_gpu_that_is_not_there_is_dirty() -> None:
    verdict = gate.check([0])
    assert verdict.clean is False
    assert "GPU(s) [0] not found" in verdict.problems[0]


def test_gpu_check_stage_succeeds_with_the_no_gpu_verdict(tmp_path: Path) -> None:
    sink = RecordingSink()
    result = gpu_check.run(StageContext(work_dir=tmp_path, sink=sink), GpuCheckParams())
    assert result["verdict"] == "no_gpus"
    assert result["gpu_count"] == 0


def test_shm_scan_finds_stale_sglang_segments(tmp_path: Path) -> None:
    # A folder of our own stands in for /dev/shm, with the names SGLang leaves behind.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "psm_1a2b3c4d").write_bytes(b"x" * 1000)
        (tmp_path / f"sgl_shm_bcast_{live.pid}_ab12").write_bytes(b"x" * 10)
        (tmp_path / "sgl_shm_bcast_999999999_cd34").write_bytes(b"x" * 10)
        (tmp_path / "sglang_loads_0.shm").write_bytes(b"x")
        (tmp_path / "sem.loky-123-abc").write_bytes(b"x")
        (tmp_path / "unrelated").write_bytes(b"x")
        report = shm.scan(tmp_path)
    finally:
        live.kill()
        live.wait()
    names = {s.name: s for s in report.segments}
    assert "unrelated" not in names
    assert names[f"sgl_shm_bcast_{live.pid}_ab12"].owner_alive is True
    assert names["sgl_shm_bcast_999999999_cd34"].owner_alive is False
    assert names["psm_1a2b3c4d"].owner_alive is None
    assert len(report.stale) == 4
    assert report.to_dict()["stale_count"] == 4


def test_shm_with_too_little_free_space_is_dirty(tmp_path: Path) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize / 2**20
    verdict = gate.check([], gate.GateThresholds(min_shm_free_mib=free * 10), shm_path=tmp_path)
    assert verdict.clean is False
    assert "MiB free" in verdict.problems[0]


def test_an_out_of_memory_error_names_the_other_processes_on_the_gpu() -> None:
    """Run 4 on the H200: a training job ran out of memory because five other trainings held 130 GiB of its
    GPU, and the error advised a smaller batch. The inventory here is built by hand: no GPU exists on this
    machine, so NVML's answer is the one thing stood in for (the no-NVML path runs for real below)."""
    mine, theirs = 4242, [1708, 1709, 1711, 1712, 1713]
    held = [38_000.0, 25_000.0, 36_000.0, 30_000.0, 500.0]
    procs = [gpus.GpuProcess(p, f"python3 recipes.py {p}", mib) for p, mib in zip(theirs, held, strict=True)]
    busy = gpus.GpuInfo(0, "GPU-0", "NVIDIA H200", 134_000.0, 143_771.0, 100.0, None, None,
                        [gpus.GpuProcess(mine, "eyas train", 4_000.0), *procs])  # fmt: skip
    other = gpus.GpuInfo(1, "GPU-1", "NVIDIA H200", 90_000.0, 143_771.0, 0.0, None, None, procs[:1])
    text = gpus.describe_holders([busy, other], [0], lambda pid: pid == mine)
    assert text == (
        "GPU 0 had 134000 of 143771 MiB in use, 129500 MiB of it by 5 other process(es): "
        "pid 1708 (python3 recipes.py 1708, 38000 MiB), pid 1711 (python3 recipes.py 1711, 36000 MiB), "
        "pid 1712 (python3 recipes.py 1712, 30000 MiB), pid 1709 (python3 recipes.py 1709, 25000 MiB)"
        " and 1 more"
    )  # the job's own 4 GiB and GPU 1, which it does not hold, are not named
    alone = gpus.GpuInfo(0, "GPU-0", "NVIDIA H200", 4_600.0, 143_771.0, 100.0, None, None,
                         [gpus.GpuProcess(mine, "eyas train", 4_000.0), procs[-1]])  # fmt: skip
    assert gpus.describe_holders([alone], [0], lambda pid: pid == mine) is None  # 0.5 GiB is not the cause
    error = out_of_memory("out of memory on a batch of 32 x 640 tokens", 32, 640, [0])  # no NVML here
    assert error.message == "out of memory on a batch of 32 x 640 tokens: lower batch_size or max_len"
    assert error.reason == TerminationReason.OUT_OF_MEMORY
    assert error.details == {"batch_size": 32, "seq_len": 640, "other_holders": None}


def test_the_jobs_own_processes_are_those_of_its_process_group() -> None:
    same = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    apart = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert gpus._in_this_job(os.getpid()) is True
        assert gpus._in_this_job(same.pid) is True
        assert gpus._in_this_job(apart.pid) is False  # another job: the runner gives each its own group
        assert gpus._in_this_job(2**22 + 1) is False  # a pid this machine cannot see
    finally:
        for process in (same, apart):
            process.kill()
            process.wait()
