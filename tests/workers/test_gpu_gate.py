"""The GPU gate and /dev/shm scan on this machine (no NVIDIA driver: the no-NVML path runs for real)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from contract.params.gpu_check import GpuCheckParams
from drafting.hostinfo import gate, gpus, shm
from drafting.stages import gpu_check
from drafting.stages.base import RecordingSink, StageContext


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
