"""The eagle3 template: which jobs a pipeline is made of, their params and what each reads from the last."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.pipelines.schemas import Eagle3PipelineCreate

EAGLE3_STEPS = ("generate", "extract", "train", "fix_keys", "gpu_check", "eval", "benchmark")


@dataclass(frozen=True)
class StepPlan:
    step: str
    kind: str
    params: dict[str, Any]
    # dotted param -> (step, artifact kind): filled from that step's artifact when this step is queued
    refs: dict[str, tuple[str, str]] = field(default_factory=dict)


def eagle3_plan(spec: Eagle3PipelineCreate, root: str) -> list[StepPlan]:
    hidden, train_dir, draft = f"{root}/hidden_states", f"{root}/train", f"{root}/sglang_draft"
    plans = _generate_plan(spec, f"{root}/conversations.jsonl")
    data = plans[0].params["output"] if plans else spec.data
    extract_refs = {"data": ("generate", "conversations")} if plans else {}
    plans += [
        StepPlan(
            "extract",
            "extract",
            {**spec.extract, "target": spec.target, "data": data, "output": hidden},
            refs=extract_refs,
        ),
        StepPlan(
            "train",
            "train",
            {**spec.train, "data": hidden, "target": spec.target, "output": train_dir},
            refs={"data": ("extract", "hidden_states")},
        ),
        StepPlan(
            "fix_keys",
            "fix_keys",
            {"target_config": spec.target, **spec.fix_keys, "source": train_dir, "dest": draft},
            refs={"source": ("train", "best_drafter")},
        ),
        StepPlan("gpu_check", "gpu_check", dict(spec.gpu_check)),
    ]
    if spec.eval is not None:
        plans.append(
            StepPlan(
                "eval",
                "eval",
                {**spec.eval, "model": spec.target, "draft": draft},
                refs={"draft": ("fix_keys", "sglang_checkpoint")},
            )
        )
    launch = {**spec.benchmark.get("launch", {}), "model": spec.target, "draft": draft}
    plans.append(
        StepPlan(
            "benchmark",
            "benchmark",
            {**spec.benchmark, "mode": "sweep", "launch": launch},
            refs={"launch.draft": ("fix_keys", "sglang_checkpoint")},
        )
    )
    return plans


def _generate_plan(spec: Eagle3PipelineCreate, output: str) -> list[StepPlan]:
    """The optional first step: regenerate the conversations with the target. The eval and benchmark prompt
    sets are added to its held-out prompts, so a training prompt equal to an evaluation prompt is dropped."""
    if spec.generate is None:
        return []
    held_out = [p for p in ((spec.eval or {}).get("prompts"), spec.benchmark.get("prompts")) if p]
    holdout = list(dict.fromkeys([*spec.generate.get("holdout_prompts", []), *held_out]))
    params = {**spec.generate, "target": spec.target, "output": output}
    if holdout:
        params["holdout_prompts"] = holdout
    return [StepPlan("generate", "generate", params)]
