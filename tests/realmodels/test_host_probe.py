"""bench/gpu/host_probe.py: the CPU facts printed beside a GPU run (one core's speed, the host's CPU split,
the busiest processes), checked on this machine with a process made to burn a core."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

import host_probe


def test_the_probe_times_a_core_and_reads_the_cpu_split() -> None:
    found = host_probe.probe()
    assert found["cpus"] >= 1
    assert 1 < found["python_loop_ms"] < 10_000  # 2 M iterations: ~0.1 s on a current core
    split = found["cpu_split_pct"]
    assert set(split) == {"user", "system", "iowait", "steal", "idle"}
    assert 90 <= sum(split.values()) <= 110  # percentages of the same second (rounded per field)


def test_the_sampler_names_a_process_that_burns_a_core(capsys: pytest.CaptureFixture[str]) -> None:
    burner = [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 8: pass"]
    sampler = host_probe.CpuSampler(every_s=0)
    child = subprocess.Popen(burner)
    try:
        time.sleep(0.3)
        sampler({})  # the child is new: this call starts its interval
        time.sleep(1.5)
        capsys.readouterr()
        sampler({})
    finally:
        child.kill()
        child.wait()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("[cpu] user ")
    assert "steal" in line
    listed = dict(entry.strip().rsplit(" ", 1) for entry in line.split("|", 1)[1].split(","))
    # the child by its pid among the busiest (on a loaded machine another process may burn more)
    burning = {name: pct for name, pct in listed.items() if name.endswith(f":{child.pid}")}
    assert burning, line
    assert float(next(iter(burning.values())).rstrip("%")) > 50
