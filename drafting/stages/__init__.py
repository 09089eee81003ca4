"""Stage registry: kind -> module with `run(ctx, params)`. Modules are imported only when a job runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from drafting.stages.base import StageContext

STAGE_MODULES: dict[str, str] = {
    "selftest": "drafting.stages.selftest",
    "gpu_check": "drafting.stages.gpu_check",
    "fix_keys": "drafting.stages.fix_keys",
    "doctor": "drafting.stages.doctor",
    "extract": "drafting.stages.extract",
    "train": "drafting.stages.train",
    "launch": "drafting.stages.launch",
    "benchmark": "drafting.stages.benchmark",
    "eval": "drafting.stages.evaluate",
}

StageFn = Callable[[StageContext, Any], Any]


def load_stage(kind: str) -> StageFn:
    module = importlib.import_module(STAGE_MODULES[kind])
    run: StageFn = module.run
    return run
