"""bench.journey_constructed's pipeline spec (the constructed journey on a GPU host), as the API validates and
plans it, with and without the eval step, on the host and SGLang arguments its flags give."""

from __future__ import annotations

from pathlib import Path

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan
from bench.journey_constructed import spec


def test_the_journey_plans_with_and_without_eval(tmp_path: Path) -> None:
    extra = ("--attention-backend", "triton")
    full = spec(tmp_path, [5], host="h1", graph_max_bs=4, epochs=8, lr=1e-3, sglang_args=extra)
    lean = spec(
        tmp_path, [5], host="h1", graph_max_bs=4, epochs=8, lr=1e-3, sglang_args=extra, eval_step=False
    )
    assert full | {"eval": None} == lean
    steps = {
        name: [s.step for s in eagle3_plan(Eagle3PipelineCreate(**body), str(tmp_path / "runs" / name))]
        for name, body in (("full", full), ("lean", lean))
    }
    assert steps["full"] == ["extract", "train", "fix_keys", "gpu_check", "eval", "benchmark"]
    assert steps["lean"] == ["extract", "train", "fix_keys", "gpu_check", "benchmark"]
    assert lean["host"] == "h1"
    launch = lean["benchmark"]["launch"]["extra_args"]
    assert launch == ["--attention-backend", "triton", "--cuda-graph-max-bs", "4"]  # graphs on, captured to 4
    reference = spec(tmp_path, [5], device="cpu", engine="reference")
    assert reference["benchmark"]["launch"] == {"engine": "reference"}
    assert reference["train"]["device"] == reference["extract"]["device"] == "cpu"
