"""What a lent GPU host's CPUs give, printed beside a GPU run, to explain a slow generate.

Runs 8, 9 and 10 generated with the same settings at 20.8 k, 8.1 k and ≈ 9 k tok/s (SGLang's own log), with
the request queue full each time. On a 135M target SGLang's scheduler is a Python loop that launches one
small decode step after another, so a host whose cores run slower, or whose virtual CPUs are taken by its
neighbours (`steal`), decodes slower with the same GPU. Nothing measured that yet. `probe` times a fixed
pure-Python loop (one core's speed, as a scheduler sees it) and reads the CPU time split; `CpuSampler`, a
`follow` hook, prints every `every_s` the busiest processes as NAME:PID (SGLang names its own:
`sglang::scheduler`, …)
and the host's user/system/steal/idle split since the last sample.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

LOOP = 2_000_000  # about 0.1 s on a current x86 core


def loop_ms() -> float:
    """Milliseconds for LOOP iterations of a plain Python loop, the best of three (one core's speed)."""
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        total = 0
        for i in range(LOOP):
            total += i & 7
        best = min(best, time.perf_counter() - began)
    return round(best * 1000, 1)


def probe() -> dict[str, Any]:
    split = psutil.cpu_times_percent(interval=1.0)
    return {
        "cpus": os.cpu_count(),
        "kernel": os.uname().release,
        "python_loop_ms": loop_ms(),
        "cpu_split_pct": {k: getattr(split, k) for k in ("user", "system", "iowait", "steal", "idle")},
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


class CpuSampler:
    """A `follow` hook: every `every_s`, the `top` busiest processes (percent of one core since the last
    sample) and the host's CPU split, on one line."""

    def __init__(self, every_s: float = 60.0, top: int = 5) -> None:
        self.every_s, self.top = every_s, top
        self.last = time.monotonic()
        self.processes: dict[int, psutil.Process] = {}
        psutil.cpu_times_percent()  # the first call starts the interval the next one reports
        self._sample()

    def __call__(self, _pipeline: dict[str, Any]) -> None:
        if time.monotonic() - self.last < self.every_s:
            return
        self.last = time.monotonic()
        busiest = sorted(self._sample(), reverse=True)[: self.top]
        split = psutil.cpu_times_percent()
        host = " ".join(f"{k} {getattr(split, k):.0f}%" for k in ("user", "system", "steal", "idle"))
        procs = ", ".join(f"{name}:{pid} {pct:.0f}%" for pct, name, pid in busiest)
        print(f"[cpu] {host} | {procs}", flush=True)

    def _sample(self) -> list[tuple[float, str, int]]:
        """(percent of one core since the last sample, name, pid) of every process still there."""
        seen: list[tuple[float, str, int]] = []
        alive: dict[int, psutil.Process] = {}  # ended processes drop out: the map holds this sample's only
        for proc in psutil.process_iter(["pid", "name"]):
            known = self.processes.get(proc.pid, proc)
            try:
                seen.append((known.cpu_percent(), known.name(), proc.pid))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            alive[proc.pid] = known
        self.processes = alive
        return seen
