"""eval: offline acceptance of a drafter against its target at several depths, before any server exists."""

from __future__ import annotations

from typing import Any

import torch

from contract.params.evaluate import EvalParams
from drafting.context import StageContext, remote_code
from drafting.serving.engine.models import DTYPES, LoadedModels, load_models, pick_device
from drafting.serving.evaluation.divergence import TargetScorer
from drafting.serving.evaluation.offline import LoadedTargetScorer, evaluate_acceptance
from drafting.serving.prompts import set_summary
from drafting.stages._target import target_errors
from drafting.stages.prompt_sets import stage_prompts


def run(ctx: StageContext, params: EvalParams) -> dict[str, Any]:
    device = _device(ctx, params)
    dtype_name = (
        params.dtype if params.dtype != "auto" else ("bfloat16" if device.type == "cuda" else "float32")
    )
    prompts, note = stage_prompts(ctx, params.prompts, params.max_prompts, chat_template_from=params.model)
    summary = set_summary(params.prompts, prompts, note)
    ctx.log(
        f"eval: {len(prompts)} prompts of {summary['set']}, depths {params.depths}, {device} {dtype_name}"
    )
    if "turns" in summary:
        ctx.log(f"eval: {summary['turns']}")
    trust = remote_code(ctx, params.trust_remote_code)
    with target_errors():
        models = load_models(
            params.model, params.draft, device=device, dtype=DTYPES[dtype_name], trust_remote_code=trust
        )

    def progress(done: int, total: int) -> None:
        ctx.check_cancelled()
        ctx.progress(done / total, f"{done}/{total} prompts")

    rows = evaluate_acceptance(
        models,
        prompts,
        params.depths,
        max_new_tokens=params.max_new_tokens,
        ignore_eos=params.ignore_eos,
        check_outputs=params.check_outputs,
        scorer=_scorer(params, models, device, dtype_name) if params.check_outputs else None,
        progress=progress,
    )
    for row in rows:
        ctx.metric("eval_accept_length", row["accept_length"] or 0.0, step=row["depth"])
        ctx.log(_describe(row))
    return {
        "prompts": len(prompts),
        "prompt_set": summary,
        "device": str(device),
        "dtype": dtype_name,
        "depths": rows,
    }


def _device(ctx: StageContext, params: EvalParams) -> torch.device:
    """auto: the job's GPU when it holds one (the worker exposes only its lease), else the CPU."""
    if params.device == "auto":
        return pick_device("cuda" if ctx.gpus else "cpu")
    return pick_device(params.device)


def _scorer(params: EvalParams, models: LoadedModels, device: torch.device, dtype: str) -> TargetScorer:
    """The judge of divergent outputs: the loaded target when it already runs in float32 or wider, else a
    float32 copy where it fits (TargetScorer falls back to bf16 and says so)."""
    if dtype in ("float32", "float64"):
        return LoadedTargetScorer(models.target, f"{dtype} on {device}")
    return TargetScorer(params.model, device=device.type)


def _describe(row: dict[str, Any]) -> str:
    rates = ", ".join(f"{r:.2f}" for r in row["position_accept_rate"][:8])
    more = ", …" if row["depth"] > 8 else ""
    line = (
        f"depth {row['depth']}: accept length {row['accept_length']} (meta {row['accept_length_meta']}), "
        f"per-position acceptance [{rates}{more}], outputs match: {row['outputs_match']}"
    )
    if row.get("divergence"):
        counts = row["divergence"]
        line += (
            f" (identical {counts['identical']}, near-tie {counts['near_tie']}, real loss "
            f"{counts['real_loss']}, unscored {counts['unscored']})"
        )
    for name, stats in (row.get("by_category") or {}).items():
        line += f"\n  {name}: accept length {stats.get('accept_length')} over {stats['prompts']} prompts"
    return line
