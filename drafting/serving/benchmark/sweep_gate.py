"""The sweep's release gate: deployable, not deployable, or inconclusive.

Deployable only when no config's output is a real loss against the baseline's (sweep_judge.py: near-ties
accepted, bit for bit where the target could not judge), no request failed, and the chosen config's
paired speedup at the gate's concurrency is above the threshold with 95 % confidence (its interval's lower
bound). An interval wholly above or below the threshold decides, however wide. One that holds the threshold
decides "not deployable" only when it is narrow (half-width at most `max_speedup_half_width`: the speedup is
then too close to the threshold to matter); a wider one is `inconclusive`, distinct from "not deployable",
and says how many more requests would decide (the half-width shrinks as 1/√n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from contract.params.benchmark import SpecConfig
from drafting.serving.benchmark.speedup_stats import CONFIDENCE


def best_config(rows: Sequence[dict[str, Any]]) -> str | None:
    """The measured config with the highest speedup lower bound (a config its smoke test refused is never
    best)."""
    speculative = [row for row in rows if row["config"] is not None and not row.get("rejected")]
    if not speculative:
        return None
    return str(max(speculative, key=_lower_bound)["config"])


def _lower_bound(row: dict[str, Any]) -> float:
    value = row.get("speedup_ci_low")
    return float(value) if value is not None else -math.inf


def release_gate(
    rows: Sequence[dict[str, Any]], chosen: SpecConfig | None, threshold: float, max_half_width: float = 0.05
) -> dict[str, Any]:
    """Deployable only when no config's output is a real loss against the baseline's (near-ties accepted;
    bit for bit where the target could not judge), no request failed, and the chosen config's speedup is
    above the threshold with 95 % confidence (its interval's lower bound). Inconclusive, neither, when the
    outputs pass but the speedup's interval is wider than ±max_half_width: more requests would decide."""
    speculative = [r for r in rows if r["config"] is not None]
    reasons = [reason for r in speculative for reason in _output_reasons(r)]
    reasons += [
        f"{r['label']}: {r['failed_requests']} request(s) failed" for r in rows if r["failed_requests"]
    ]
    label = chosen.label if chosen is not None else best_config(rows)
    row = next((r for r in speculative if r["config"] == label and not r.get("rejected")), None)
    judged = judge_speedup(label, row, threshold, max_half_width)
    outcome = "deployable"
    if reasons or judged["outcome"] == "fail":
        outcome = "not_deployable"
        reasons += [judged["text"]] if judged["outcome"] == "fail" else []
    elif judged["outcome"] == "inconclusive":
        outcome = "inconclusive"
        reasons.append(judged["text"])
    required = threshold > 0
    if outcome == "deployable":
        # A threshold of 0 asks for no speedup (the CPU demos): never call what it passed "deployable".
        verdict = f"{'deployable' if required else 'no speedup required'} at {label}: {judged['text']}"
    elif outcome == "inconclusive":
        verdict = f"inconclusive: {judged['text']}"
    else:
        verdict = "not deployable: " + "; ".join(reasons)
    counted = [r for r in speculative if r.get("divergences")]
    return {
        # no verdict (None) while inconclusive: stored results and their listings must not read it as "not
        # deployable"
        "deployable": None if outcome == "inconclusive" else outcome == "deployable",
        "outcome": outcome,
        "speedup_required": required,
        "chosen_config": label,
        "chosen_depth": row["steps"] if row else None,
        "concurrency": row.get("concurrency") if row else None,
        "speedup": row["speedup"] if row else None,
        "speedup_ci_low": row["speedup_ci_low"] if row else None,
        "speedup_ci_high": row["speedup_ci_high"] if row else None,
        "speedup_half_width": row.get("speedup_half_width") if row else None,
        "max_speedup_half_width": max_half_width,
        "requests_to_decide": judged.get("requests_to_decide"),
        "confidence": CONFIDENCE,
        "threshold": threshold,
        "judged_on": "speedup_ci_low",
        "verdict": verdict + _outputs_note(counted),
        "reasons": reasons,
        "near_ties_accepted": sum(r["divergences"]["near_tie"] for r in counted if not _strict(r)),
        "unscored_not_judged": sum(r["divergences"]["unscored"] for r in counted if not _strict(r)),
        "strict_configs": [r["config"] for r in counted if _strict(r)],
    }


def _strict(row: dict[str, Any]) -> str | None:
    """Why a row's outputs were compared bit for bit (the target could not judge them), else None."""
    reason = (row.get("divergence_judge") or {}).get("strict_reason")
    return str(reason) if reason else None


def _output_reasons(row: dict[str, Any]) -> list[str]:
    label, match = row["label"], row["outputs_match"]
    if row.get("rejected"):
        smoke = row["rejected"]
        why = f"{smoke.get('verdict')}: {smoke.get('message')}"
        return [f"{label}: refused by its smoke test, not measured ({why})"]
    if match is None:
        return [f"{label}: outputs could not be compared"]
    if match:
        return []
    losses = (row.get("divergences") or {}).get("real_loss", 0)
    strict = _strict(row)
    if losses and not strict:
        details = row.get("divergence_details") or []
        first = next((d for d in details if d["verdict"] == "real_loss"), None)
        text = f"{label}: {losses} real loss(es): outputs the target would not produce"
        if first is not None:
            text += f" (request {first['request']} at token {first['position']}: {first['note']})"
        return [text]
    how = f" in {row['mismatched_requests']} request(s), compared bit for bit: {strict}" if strict else ""
    return [f"{label}: greedy outputs differ from the baseline's{how}"]


def _outputs_note(counted: Sequence[dict[str, Any]]) -> str:
    """What the verdict says about outputs: near-ties accepted, divergences not judged, strict comparisons."""
    if not counted:
        return ""
    judged = [r for r in counted if not _strict(r)]
    near = sum(r["divergences"]["near_tie"] for r in judged)
    unscored = sum(r["divergences"]["unscored"] for r in judged)
    parts = []
    if near:
        parts.append(
            f"{near} numerical near-tie(s) accepted (both tokens within the bound of the target's top logit)"
        )
    if unscored:
        parts.append(f"{unscored} divergence(s) not judged (past the scoring cap; reported as unscored)")
    parts += [f"{r['label']} compared bit for bit ({_strict(r)})" for r in counted if _strict(r)]
    if not parts:
        parts.append("every greedy output identical to the baseline's")
    return "; outputs: " + ", ".join(parts)


def judge_speedup(
    label: str | None, row: dict[str, Any] | None, threshold: float, max_half_width: float
) -> dict[str, Any]:
    """{"outcome": pass | fail | inconclusive, "text", ...} for the chosen config's row."""
    if row is None:
        return {"outcome": "fail", "text": f"{label}: no speedup was measured"}
    low, high, mean = row.get("speedup_ci_low"), row.get("speedup_ci_high"), row.get("speedup")
    n, half = row.get("speedup_n"), row.get("speedup_half_width")
    where = f" at concurrency {row['concurrency']}" if row.get("concurrency") is not None else ""
    interval = f"speedup {mean}, {CONFIDENCE * 100:g} % CI {low}–{high} over {n} requests{where}"
    if threshold <= 0:
        # No speedup asked for (a CPU demo, whose reference engine is slower than plain decoding): the gate
        # judges outputs only, whatever the speedup and its interval.
        slower = " (slower than the baseline)" if high is not None and float(high) < 1 else ""
        return {"outcome": "pass", "text": f"threshold {threshold}; {interval}{slower}"}
    if low is None or high is None:
        return {
            "outcome": "fail",
            "text": f"{label}: speedup {mean} from {n} request(s){where} has no confidence interval",
        }
    if half is not None and half > max_half_width and low <= threshold < high:
        distance = abs(float(mean) - threshold) if mean is not None else 0.0
        more = _more_requests(n, half, max(max_half_width, distance))
        return {
            "outcome": "inconclusive",
            "requests_to_decide": more,
            "text": (
                f"{label}: the interval holds the threshold {threshold} and reaches ±{half}, more than "
                f"±{max_half_width} ({interval}); about {more} more request(s) would decide"
            ),
        }
    if low <= threshold:
        return {
            "outcome": "fail",
            "text": f"{label}: the speedup's lower bound {low} is not above the threshold {threshold} "
            f"({interval})",
        }
    return {
        "outcome": "pass",
        "text": f"the speedup's lower bound {low} is above the threshold {threshold} ({interval})",
    }


def _more_requests(n: Any, half: float, target: float) -> int | None:
    """From the observed spread: the half-width shrinks as 1/√n, so n·(half/target)² requests bring it to
    `target`: the bound, or the distance from the speedup to the threshold where that is larger (then the
    interval leaves the threshold)."""
    if not isinstance(n, int) or n < 1:
        return None
    return max(1, math.ceil(n * (half / target) ** 2) - n)
