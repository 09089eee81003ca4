"""The eagle3 pipeline extracts for the SGLang release its fix_keys step checks the draft against."""

from __future__ import annotations

from typing import Any

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan


def extract_steps(**spec: Any) -> dict[str, dict[str, Any]]:
    base = {"target": "/models/t", "data": "/data/c.jsonl", "workdir": "/work"}
    plans = eagle3_plan(Eagle3PipelineCreate.model_validate({**base, **spec}), "/work/p")
    return {plan.step: plan.params for plan in plans if plan.kind == "extract"}


def test_extract_takes_the_release_fix_keys_names_unless_it_names_its_own() -> None:
    held_out = {"held_out": {"conversations": "/data/held.jsonl"}}
    steps = extract_steps(fix_keys={"sglang_version": "0.5.23"}, **held_out)
    assert {step: params["sglang_version"] for step, params in steps.items()} == {
        "extract": "0.5.23",
        "extract_held_out": "0.5.23",
    }
    own = extract_steps(fix_keys={"sglang_version": "0.5.23"}, extract={"sglang_version": "0.5.14"})
    assert own["extract"]["sglang_version"] == "0.5.14"
    assert "sglang_version" not in extract_steps()["extract"]  # extract's own default then applies
