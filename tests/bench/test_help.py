"""Every benchmark module answers `python -m bench.NAME --help` from the repository root: it imports with
what eyas installs (an optional package such as SGLang or speculators is imported only when the benchmark
runs) and says what it measures. Modules are found, not listed, so a new one is held to this too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_"))


def test_the_benchmarks_are_found() -> None:
    assert {"dispatch", "train_step", "journey", "extract"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_every_benchmark_module_answers_help(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]
    assert f"python -m bench.{module}" in done.stdout  # the module's docstring, with its command
