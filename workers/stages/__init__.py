"""Stage registry: kind -> module with `run(ctx, params)`. Modules are imported only when a job runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from workers.stages.base import StageContext

STAGE_MODULES: dict[str, str] = {
    "selftest": "workers.stages.selftest",
    "gpu_check": "workers.stages.gpu_check",
    "fix_keys": "workers.stages.fix_keys",
    "doctor": "workers.stages.doctor",
    "extract": "workers.stages.extract",
    "train": "workers.stages.train",
    "launch": "workers.stages.launch",
    "benchmark": "workers.stages.benchmark",
    "eval": "workers.stages.evaluate",
}

StageFn = Callable[[StageContext, Any], Any]


def load_stage(kind: str) -> StageFn:
    module = importlib.import_module(STAGE_MODULES[kind])
    run: StageFn = module.run
    return run
