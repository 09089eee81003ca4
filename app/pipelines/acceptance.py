"""Acceptance length by depth, three ways, side by side: what training estimated, what eyas's `eval` measured
in torch, and what the serving engine reported in the sweep (SGLang's meta_info on a GPU host) — with each
prediction's error against the served figure. A user learns whether to trust the cheaper figures next time.

    train     `held_out/sim_accept_len_d{N}` of the checkpoint the pipeline carried on when train validated
              on a held-out extraction (the pipeline's `held_out` prompts), else `val/sim_accept_len_d{N}`
              (the split of the training data): serving replayed cycle by cycle on teacher-forced data
              (drafting/ml/simulated_acceptance.py). Runs recorded before it give their per-position
              estimate (`est_accept_len_d{N}`), which overstates serving where drafts fail in clusters
    eval      `accept_length_meta` (Σ completion tokens / Σ verify steps, as SGLang counts) at depth N
    served    the sweep row of the chain config N,1,N+1: `accept_len` from the engine's own counters
    held_out  the same from serve_held_out (the pipeline's `held_out.serve`): the engine on the held-out
              prompts train's figure is computed on, so `train_error_held_out` compares like with like

Beside acceptance, speed: `speedup` is the sweep's measured speedup of chain N at the gate's concurrency,
and `predicted_speedup` what train's acceptance predicts through the sweep's measured cost profile
(contract/speed_model.py: the host's decode step and verify cycle, measured on the launched servers), so a
user learns whether the depth picked from a profile and train's figure alone would have been right.

Errors are relative to the served figure: (predicted − served) / served. Nothing here is measured anew; a
step that has not run (or kept no figure) leaves its column null. eval's error is left null, and the report
says why, when eval decoded other requests than the sweep (another prompt set or budget): its figure then
predicts nothing about the served one. The train column never decodes the sweep's requests: it replays
teacher-forced answers of the held-out (or validation) prompts. `train_compared_on` says which, so a
train_error between two prompt sets is read as one (for example 72 held-out MT-Bench questions against the
sweep's 8 others).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.pipelines.templates import SHARED_REQUEST_FIELDS
from contract.params.benchmark import BenchmarkParams
from contract.params.evaluate import EvalParams
from contract.speed_model import predict_from_profile

EVAL_TOLERANCE = 0.05  # eval's prediction is right within 5 % of the engine's measured acceptance
# Where the train column comes from, in order of preference: the held-out extraction before the training
# data's split, the simulated acceptance before the per-position estimate of runs that predate it.
TRAIN_SOURCES = {
    "held_out/sim_accept_len_d": "held_out/sim_accept_len_d{N} of the selected checkpoint (simulated serving "
    "on the held-out extraction)",
    "held_out/est_accept_len_d": "held_out/est_accept_len_d{N} of the selected checkpoint (per-position "
    "estimate on the held-out extraction; the run predates the simulated acceptance)",
    "val/sim_accept_len_d": "val/sim_accept_len_d{N} of the selected checkpoint (simulated serving on the "
    "training data's validation split)",
    "val/est_accept_len_d": "val/est_accept_len_d{N} of the selected checkpoint (per-position estimate on "
    "the training data's validation split; the run predates the simulated acceptance)",
}


def acceptance_report(
    results: Mapping[str, Any], params: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """`results` (and `params`): each step's latest job result (or failure details) and params by step name;
    a stored value of any other shape counts as none (a read must never break on a row)."""
    results = {step: value for step, value in results.items() if isinstance(value, Mapping)}
    train, train_source = _train_estimates(results.get("train"))
    evaluated = _eval_figures(results.get("eval"))
    served, engine = _served_figures(results.get("benchmark"))
    held_out, held_out_engine = _served_figures(results.get("serve_held_out"))
    depths = sorted(set(evaluated) | set(served) | set(held_out))
    if not depths:
        return None
    differs = _requests_differ((params or {}).get("eval"), (params or {}).get("benchmark"))
    rows = [
        _row(depth, train.get(depth), evaluated.get(depth), served.get(depth), compare_eval=not differs)
        | _held_out_fields(train.get(depth), held_out.get(depth), train_source)
        | _speed_fields(depth, train.get(depth), results.get("benchmark"))
        for depth in depths
    ]
    return {
        "by_depth": rows,
        "engine": engine or held_out_engine,
        "eval_tolerance": EVAL_TOLERANCE,
        "eval_within_tolerance": _all_within(rows),
        "eval_not_compared": (
            f"eval decoded other requests than the sweep ({differs}): its figure is not compared with the "
            "served one"
            if differs
            else None
        ),
        "train_compared_on": _train_prompts(train_source, params or {}) if train else None,
        "sources": {
            "train": TRAIN_SOURCES[train_source],
            "eval": "accept_length_meta",
            "served": "accept_len of the sweep's chain config N,1,N+1",
            "served_held_out": "accept_len of serve_held_out's chain config N,1,N+1 (the held-out prompts)",
            "speedup": "the sweep's paired speedup of chain N,1,N+1 at its gate's concurrency",
            "predicted_speedup": "train's acceptance through the sweep's cost profile (speed_model.py)",
        },
    }


def _row(
    depth: int,
    train: float | None,
    evaluated: float | None,
    served: float | None,
    *,
    compare_eval: bool,
) -> dict[str, Any]:
    return {
        "depth": depth,
        "train_estimate": train,
        "eval": evaluated,
        "served": served,
        "train_error": _relative(train, served),
        "eval_error": _relative(evaluated, served) if compare_eval else None,
    }


def _held_out_fields(train: float | None, served: float | None, source: str) -> dict[str, Any]:
    """The engine on the held-out prompts, and train's error against it where train's figure came from
    those prompts (not from the training data's split)."""
    same_prompts = source.startswith("held_out/")
    return {
        "served_held_out": served,
        "train_error_held_out": _relative(train, served) if same_prompts else None,
    }


def _speed_fields(depth: int, train: float | None, result: Mapping[str, Any] | None) -> dict[str, Any]:
    """The sweep's measured speedup of chain `depth` at its gate's concurrency, and train's prediction of it
    through the sweep's cost profile (None where either is missing)."""
    result = result or {}
    profile, level = result.get("cost_profile"), result.get("gate_concurrency")
    label = f"{depth},1,{depth + 1}"
    row = next((r for r in _mappings(result.get("rows")) if r.get("config") == label), {})
    measured = row.get("speedup") if isinstance(row.get("speedup"), int | float) else None
    predicted = None
    if isinstance(profile, Mapping) and isinstance(level, int) and train is not None:
        value = predict_from_profile(profile, label, level, train, int(profile.get("new_tokens") or 0))
        predicted = round(value, 4) if value is not None else None
    return {
        "speedup": measured,
        "predicted_speedup": predicted,
        "speedup_error": _relative(predicted, measured),
        "speedup_concurrency": level if measured is not None else None,
    }


def _requests_differ(evaluated: Any, swept: Any) -> str | None:
    """Which request settings eval and the sweep did not share ("prompts 'default' vs '/x.jsonl'"), or None
    when they shared all (or either step's params are unknown)."""
    if not (isinstance(evaluated, Mapping) and isinstance(swept, Mapping)):
        return None
    differences = []
    for name in SHARED_REQUEST_FIELDS:
        ours = evaluated.get(name, EvalParams.model_fields[name].default)
        theirs = swept.get(name, BenchmarkParams.model_fields[name].default)
        if ours != theirs:
            differences.append(f"{name} {ours!r} vs {theirs!r}")
    return "; ".join(differences) or None


def _train_prompts(source: str, params: Mapping[str, Any]) -> str | None:
    """Which prompts the train column replayed, beside the sweep's: None when the params do not say."""
    if source.startswith("val/"):
        return "the training data's validation split, not the sweep's prompts: train_error compares two sets"
    held_out, swept = params.get("generate_held_out"), params.get("benchmark")
    if not (isinstance(held_out, Mapping) and isinstance(swept, Mapping)):
        return None
    ours, theirs = (
        held_out.get("prompts"),
        swept.get("prompts", BenchmarkParams.model_fields["prompts"].default),
    )
    if ours == theirs:
        return f"the sweep's prompts ({ours!r}), answered by the target in generate, teacher-forced"
    return f"held-out prompts {ours!r}, the sweep's {theirs!r}: train_error compares two sets"


def _relative(predicted: float | None, served: float | None) -> float | None:
    if predicted is None or not served:
        return None
    return round((predicted - served) / served, 4)


def _all_within(rows: list[dict[str, Any]]) -> bool | None:
    errors = [row["eval_error"] for row in rows if row["eval_error"] is not None]
    return all(abs(error) <= EVAL_TOLERANCE for error in errors) if errors else None


def _train_estimates(result: Mapping[str, Any] | None) -> tuple[dict[int, float], str]:
    """The selected checkpoint's estimates by depth, and their prefix: the held-out extraction's when that
    epoch has them, else the validation split's."""
    epochs = _mappings((result or {}).get("epochs"))
    best = (result or {}).get("best") or {}
    chosen = epochs[-1] if epochs else {}
    if epochs and (result or {}).get("selected") == best.get("checkpoint"):
        chosen = next((e for e in epochs if e.get("epoch") == best.get("epoch")), chosen)
    *preferred, last = TRAIN_SOURCES
    for prefix in preferred:
        if figures := _by_depth(chosen, prefix):
            return figures, prefix
    return _by_depth(chosen, last), last


def _by_depth(summary: Mapping[str, Any], prefix: str) -> dict[int, float]:
    return {
        int(key.removeprefix(prefix)): round(float(value), 4)
        for key, value in summary.items()
        if key.startswith(prefix) and key.removeprefix(prefix).isdigit() and isinstance(value, int | float)
    }


def _eval_figures(result: Mapping[str, Any] | None) -> dict[int, float]:
    figures = {}
    for entry in _mappings((result or {}).get("depths")):
        value = entry.get("accept_length_meta", entry.get("accept_length"))
        if isinstance(entry.get("depth"), int) and isinstance(value, int | float):
            figures[entry["depth"]] = round(float(value), 4)
    return figures


def _served_figures(result: Mapping[str, Any] | None) -> tuple[dict[int, float], str | None]:
    result = result or {}
    figures: dict[int, float] = {}
    for row in _mappings(result.get("rows") or result.get("rows_measured")):
        steps, topk, tokens, value = (row.get(k) for k in ("steps", "topk", "draft_tokens", "accept_len"))
        chain = isinstance(steps, int) and topk in (1, None) and tokens in (steps + 1, None)
        if chain and isinstance(steps, int) and isinstance(value, int | float) and not row.get("rejected"):
            figures[steps] = round(float(value), 4)
    engine = result.get("engine")
    return figures, engine if isinstance(engine, str) else None


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    """The dict entries of a stored list (a result is stored JSON: a stray shape must not break a read)."""
    return [entry for entry in value if isinstance(entry, Mapping)] if isinstance(value, list) else []
