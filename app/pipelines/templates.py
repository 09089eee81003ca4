"""The eagle3 template: which jobs a pipeline is made of, their params and what each reads from the last."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.pipelines.schemas import Eagle3PipelineCreate
from contract.params.benchmark import BenchmarkParams
from contract.params.generate import GenerateParams

# Step names in run order. Names are not kinds: generate_held_out is a `generate` job, extract_held_out an
# `extract` job; jobs are keyed by their step (`pipeline_step`) everywhere.
EAGLE3_STEPS = (
    "generate",
    "generate_held_out",
    "extract",
    "extract_held_out",
    "train",
    "fix_keys",
    "gpu_check",
    "eval",
    "serve_held_out",
    "benchmark",
)
# eval and benchmark params that decide which requests are decoded (same names and defaults in both)
SHARED_REQUEST_FIELDS = ("prompts", "max_prompts", "max_new_tokens", "ignore_eos")
# generate params the held-out step does not copy: what it answers and where it writes are its own
_NOT_COPIED_TO_HELD_OUT = ("prompts", "self_prompts", "output", "limit", "holdout_prompts")
# benchmark params serve_held_out does not copy (it sets its own): which requests it asks and how, and
# the gate's speed judgement (an acceptance pass: the sweep after it judges speed)
_SET_BY_SERVE_HELD_OUT = (
    *SHARED_REQUEST_FIELDS, "concurrency", "configs", "depths", "chosen_config", "chosen_depth",
    "speedup_threshold",
)  # fmt: skip
# every prompt of the held-out file: BenchmarkParams' own bound on max_prompts
ALL_PROMPTS: int = next(
    m.le for m in BenchmarkParams.model_fields["max_prompts"].metadata if hasattr(m, "le")
)
HELD_OUT_CONCURRENCY = 8  # on one H200: 72 questions, 2 rounds of a baseline and a chain server in 167 s


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
    held_out_file = (spec.held_out.conversations if spec.held_out else None) or f"{root}/held_out.jsonl"
    answered, extracted = _held_out_plan(spec, held_out_file, f"{root}/held_out_states")
    train = {**spec.train, "data": hidden, "target": spec.target, "output": train_dir}
    train_refs = {"data": ("extract", "hidden_states")}
    plans += answered  # generate_held_out right after generate: one target server after the other
    if extracted:
        train["held_out_data"] = extracted[0].params["output"]
        train_refs["held_out_data"] = ("extract_held_out", "hidden_states")
    plans.append(
        StepPlan(
            "extract",
            "extract",
            {**extract_params(spec), "target": spec.target, "data": data, "output": hidden},
            refs=extract_refs,
        )
    )
    plans += extracted
    plans += [
        StepPlan("train", "train", train, refs=train_refs),
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
                {**_eval_defaults(spec), **spec.eval, "model": spec.target, "draft": draft},
                refs={"draft": ("fix_keys", "sglang_checkpoint")},
            )
        )
    launch = {**spec.benchmark.get("launch", {}), "model": spec.target, "draft": draft}
    plans += _serve_held_out_plan(spec, launch, held_out_file)
    plans.append(
        StepPlan(
            "benchmark",
            "benchmark",
            {**spec.benchmark, "mode": "sweep", "launch": launch},
            refs={"launch.draft": ("fix_keys", "sglang_checkpoint")},
        )
    )
    return plans


def extract_params(spec: Eagle3PipelineCreate) -> dict[str, Any]:
    """extract's params: what the class captures depends on the SGLang release the draft is served with, so
    a release named for fix_keys (the release its doctor checks) is extract's too unless extract names one."""
    release = spec.fix_keys.get("sglang_version")
    return {**({"sglang_version": release} if release is not None else {}), **spec.extract}


def _serve_held_out_plan(
    spec: Eagle3PipelineCreate, launch: dict[str, Any], conversations: str
) -> list[StepPlan]:
    """serve_held_out (held_out.serve): the drafter served on the held-out conversations' prompts, the very
    records train validated on (generate_held_out's output, or the given conversations), with the budget
    their answers were made with and ending at their end of turn, at the sweep's chain depths. Train's
    simulated acceptance is computed on these answers, so the report compares the two like for like
    (SmolLM2-135M: 2.968 against SGLang's 2.937, where the sweep's other questions served 2.720;
    docs/design/checkpoint-choice.md)."""
    held_out = spec.held_out
    if held_out is None or not held_out.serve:
        return []
    copied = {k: v for k, v in spec.benchmark.items() if k not in _SET_BY_SERVE_HELD_OUT}
    budget = held_out.max_new_tokens or (spec.generate or {}).get(
        "max_new_tokens", GenerateParams.model_fields["max_new_tokens"].default
    )
    params: dict[str, Any] = {
        **copied,
        "mode": "sweep",
        "launch": launch,
        "prompts": conversations,
        "max_prompts": ALL_PROMPTS,
        "max_new_tokens": budget,
        "ignore_eos": False,
        "concurrency": HELD_OUT_CONCURRENCY,
        "speedup_threshold": 0.0,
    }
    depths = _chain_depths(spec)
    if depths:
        params["depths"] = depths
    elif spec.benchmark.get("configs") is not None:
        params["configs"] = spec.benchmark["configs"]
    refs = {"launch.draft": ("fix_keys", "sglang_checkpoint")}
    if held_out.prompts is not None:
        refs["prompts"] = ("generate_held_out", "conversations")
    return [StepPlan("serve_held_out", "benchmark", params, refs=refs)]


def _chain_depths(spec: Eagle3PipelineCreate) -> list[int]:
    """The sweep's chain depths: its chain configs' steps, or its `depths`; [] when it names neither."""
    configs = spec.benchmark.get("configs")
    if isinstance(configs, list):
        chains = [c.get("steps") for c in configs if isinstance(c, dict) and c.get("topk", 1) == 1]
        return sorted({d for d in chains if isinstance(d, int)})
    depths = spec.benchmark.get("depths")
    return list(depths) if isinstance(depths, list) else []


def _eval_defaults(spec: Eagle3PipelineCreate) -> dict[str, Any]:
    """What eval asks unless told otherwise: the sweep's requests (prompts, budget) at its chain depths, so
    the acceptance report sets eval's prediction beside the served figure of the same requests. An eval
    that named no prompts would measure the built-in set while the sweep asks others: two figures that do not
    compare (docs/design/eval-predicts-serving.md)."""
    asked = {k: spec.benchmark[k] for k in SHARED_REQUEST_FIELDS if k in spec.benchmark}
    depths = _chain_depths(spec)
    if depths:
        asked["depths"] = depths
    return asked


def _evaluation_prompts(spec: Eagle3PipelineCreate) -> list[str]:
    return [p for p in ((spec.eval or {}).get("prompts"), spec.benchmark.get("prompts")) if p]


def _holdout(*groups: list[str]) -> list[str]:
    return list(dict.fromkeys(source for group in groups for source in group))


def _generate_plan(spec: Eagle3PipelineCreate, output: str) -> list[StepPlan]:
    """The optional first step: regenerate the conversations with the target. The eval and benchmark prompt
    sets, and the held-out validation prompts, are added to its held-out prompts, so a training prompt equal
    to one of theirs is dropped."""
    if spec.generate is None:
        return []
    held_out = spec.held_out
    validation = [s for s in (held_out.prompts, held_out.conversations) if s] if held_out is not None else []
    holdout = _holdout(spec.generate.get("holdout_prompts", []), _evaluation_prompts(spec), validation)
    params = {**spec.generate, "target": spec.target, "output": output}
    if holdout:
        params["holdout_prompts"] = holdout
    return [StepPlan("generate", "generate", params)]


def _held_out_plan(
    spec: Eagle3PipelineCreate, conversations: str, states: str
) -> tuple[list[StepPlan], list[StepPlan]]:
    """(generate_held_out,) and (extract_held_out,): held-out prompts answered with generate's target,
    engine and sampling, then extracted as the training data is; train validates on the result. The eval
    and benchmark prompt sets are held out of it, so no evaluation prompt helps pick the checkpoint. Held-out
    conversations already answered need only the extract step."""
    held_out = spec.held_out
    if held_out is None:
        return [], []
    answered: list[StepPlan] = []
    refs: dict[str, tuple[str, str]] = {}
    if held_out.prompts is not None:
        assert spec.generate is not None  # the spec's validator: held-out prompts need generate
        copied = {k: v for k, v in spec.generate.items() if k not in _NOT_COPIED_TO_HELD_OUT}
        params = {**copied, "target": spec.target, "prompts": held_out.prompts, "output": conversations}
        if held_out.limit is not None:
            params["limit"] = held_out.limit
        holdout = _holdout(_evaluation_prompts(spec))  # eval and benchmark often share one set: once
        if holdout:
            params["holdout_prompts"] = holdout
        answered.append(StepPlan("generate_held_out", "generate", params))
        refs = {"data": ("generate_held_out", "conversations")}
    extract = {**extract_params(spec), "target": spec.target, "data": conversations, "output": states}
    return answered, [StepPlan("extract_held_out", "extract", extract, refs=refs)]
