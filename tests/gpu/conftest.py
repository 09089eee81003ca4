"""The GPU checks: every test here is marked `gpu` and runs only where NVML sees an NVIDIA GPU (skipped
elsewhere, with the reason); a test that needs more GPUs, or SGLang, says so and is skipped without them.

Run them on a GPU host with eyas installed (CONTRIBUTING.md, "Running things"):

    python -m pytest tests/gpu -m gpu

Each test runs its CUDA work in a spawned child process (tests/gpu/_child.py): the child's GPU memory goes
with it, so the pytest process never holds the GPU and the GPU gate a later test checks finds it clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drafting.hostinfo.gpus import inventory

HERE = Path(__file__).resolve().parent


def gpu_count() -> tuple[int, str | None]:
    found = inventory()  # NVML: no CUDA context is made in this process
    return len(found.gpus), found.error


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    count, error = gpu_count()
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.gpu)
        needed = item.get_closest_marker("gpus")
        wanted = int(needed.args[0]) if needed else 1
        if count < wanted:
            why = error or f"{count} GPU(s) here"
            item.add_marker(pytest.mark.skip(reason=f"needs {wanted} NVIDIA GPU(s): {why}"))
