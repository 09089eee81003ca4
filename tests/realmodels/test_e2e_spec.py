"""bench/gpu/e2e_pipeline.py's pipeline spec (the constructed journey run on the GPU host), as the API
validates and plans it, with and without the eval step (`--no-eval`, for the 7B shape's tight call)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

from e2e_pipeline import spec

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan


def test_the_journey_plans_with_and_without_eval(tmp_path: Path) -> None:
    full = spec(tmp_path, [5], graph_max_bs=4, epochs=8, lr=1e-3)
    lean = spec(tmp_path, [5], graph_max_bs=4, epochs=8, lr=1e-3, eval_step=False)
    assert full | {"eval": None} == lean
    steps = {
        name: [s.step for s in eagle3_plan(Eagle3PipelineCreate(**body), str(tmp_path / "runs" / name))]
        for name, body in (("full", full), ("lean", lean))
    }
    assert steps["full"] == ["extract", "train", "fix_keys", "gpu_check", "eval", "benchmark"]
    assert steps["lean"] == ["extract", "train", "fix_keys", "gpu_check", "benchmark"]
    assert "--cuda-graph-max-bs" in lean["benchmark"]["launch"]["extra_args"]  # graphs on, captured to 4
