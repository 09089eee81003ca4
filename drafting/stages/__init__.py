"""One thin module per stage: `run(ctx, params) -> result`; `contract.stages.STAGES` names each module."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from contract.stages import STAGES
from drafting.context import StageContext

StageFn = Callable[[StageContext, Any], Any]


def load_stage(kind: str) -> StageFn:
    """The stage's `run`, imported now (stage modules pull in torch; only the stage process loads them)."""
    run: StageFn = importlib.import_module(STAGES[kind].module).run
    return run
