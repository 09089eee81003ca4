"""What a sweep reports: one row per server (the baseline, then each config), the release gate, a text table.

A config's speedup is the geometric mean of its per-round ratios (the speculative batch's tok/s over the
baseline batch paired with it), with a Student-t 95 % interval computed on the log ratios (never below zero);
the gate judges the interval's lower bound, so a config whose mean clears the threshold only by noise is not
deployable. A threshold of 0 requires no speedup: the gate then judges outputs only and says so.

Outputs: each request of each round is compared with the baseline batch's of the same round, and a divergence
is judged by the target at its first divergent position (drafting.serving.sweep_judge.SweepJudge): the gate
fails a config on a real loss, accepts numerical near-ties (and counts them), reports divergences past the
scoring cap as `unscored` without judging them, and compares bit for bit where the target cannot judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.params.benchmark import SpecConfig
from drafting.serving.bench_stats import summarize
from drafting.serving.benchmarking import BenchmarkRun
from drafting.serving.prompts.categories import PromptTally, by_category
from drafting.serving.speedup_stats import CONFIDENCE, SpeedupInterval, round_speedups, speedup_interval
from drafting.serving.sweep_judge import JudgedOutputs, OutputPair, SweepJudge

BASELINE_LABEL = "baseline (no speculation)"
TABLE_FIELDS = (
    "config",
    "accept_len",
    "output_tok_s",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "outputs_match",
    "divergences",
)
_POOLED_FIELDS = (
    "accept_len",
    "output_tok_s",
    "request_throughput",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "failed_requests",
    "requests",
    "timing",
)


@dataclass
class ConfigRounds:
    """A config's measured rounds: round i pairs baseline[i] with speculative[i], run in orders[i]."""

    config: SpecConfig
    baseline: list[BenchmarkRun] = field(default_factory=list)
    speculative: list[BenchmarkRun] = field(default_factory=list)
    orders: list[list[str]] = field(default_factory=list)
    judged: JudgedOutputs | None = None  # its outputs against the baseline's (judge_outputs)
    rejected: dict[str, Any] | None = None  # the smoke report that kept this config from being measured

    def speedups(self) -> list[float]:
        return round_speedups(
            [run.summary.get("output_tok_s") for run in self.baseline],
            [run.summary.get("output_tok_s") for run in self.speculative],
        )

    def interval(self) -> SpeedupInterval | None:
        speedups = self.speedups()
        return speedup_interval(speedups) if len(speedups) >= 2 else None

    def per_prompt(self) -> list[dict[str, int | None]] | None:
        """Each prompt's completion tokens and verify steps (meta_info's) over every speculative round, in
        prompt order: what a paired comparison of two drafts reads. None when a round's records do not
        line up with another's."""
        if not self.speculative or len({len(run.records) for run in self.speculative}) != 1:
            return None
        rows = []
        for records in zip(*(run.records for run in self.speculative), strict=True):
            steps = [record.spec_verify_ct for record in records]
            rows.append(
                {
                    "completion_tokens": sum(record.completion_tokens for record in records),
                    "spec_verify_ct": None if None in steps else sum(step or 0 for step in steps),
                }
            )
        return rows

    def round_rows(self) -> list[dict[str, Any]]:
        rows = []
        for number, (base, spec, order) in enumerate(
            zip(self.baseline, self.speculative, self.orders, strict=True), start=1
        ):
            base_speed, spec_speed = base.summary.get("output_tok_s"), spec.summary.get("output_tok_s")
            ratio = round_speedups([base_speed], [spec_speed])
            rows.append(
                {
                    "round": number,
                    "order": order,
                    "baseline_tok_s": base_speed,
                    "speculative_tok_s": spec_speed,
                    "speedup": round(ratio[0], 4) if ratio else None,
                    "accept_len": spec.summary.get("accept_len"),
                }
            )
        return rows


def pooled_summary(runs: Sequence[BenchmarkRun]) -> dict[str, Any]:
    """One summary over every request of several batches (tok/s = Σ tokens / Σ batch wall time)."""
    records = [record for run in runs for record in run.records]
    summary = summarize(records, sum(run.summary.get("duration_s") or 0.0 for run in runs))
    accept = [run.summary["server_accept_len"] for run in runs if run.summary.get("server_accept_len")]
    summary["server_accept_len"] = round(math.fsum(accept) / len(accept), 4) if accept else None
    return summary


def baseline_row(runs: Sequence[BenchmarkRun]) -> dict[str, Any]:
    summary = pooled_summary(runs)
    return {
        "config": None,
        "label": BASELINE_LABEL,
        "depth": None,
        "steps": None,
        "topk": None,
        "draft_tokens": None,
        **{key: summary.get(key) for key in _POOLED_FIELDS},
        "server_accept_len": summary.get("server_accept_len"),
        "speedup": 1.0,
        "batches": len(runs),
        "outputs_match": None,
        "outputs_identical": None,
        "mismatched_requests": None,
        "divergences": None,
    }


def config_row(rounds: ConfigRounds, categories: Sequence[str | None] = ()) -> dict[str, Any]:
    """A config's row; with the prompts' categories, also its acceptance per category (`by_category`)."""
    if rounds.rejected is not None:
        return rejected_row(rounds.config, rounds.rejected)
    config = rounds.config
    summary = pooled_summary(rounds.speculative)
    interval = rounds.interval()
    speedups = rounds.speedups()
    judged = rounds.judged or judge_outputs(rounds, SweepJudge(None, lambda _: None))
    row = {
        **_identity(config),
        **{key: summary.get(key) for key in _POOLED_FIELDS},
        "server_accept_len": summary.get("server_accept_len"),
        "baseline_tok_s": pooled_summary(rounds.baseline).get("output_tok_s"),
        "speedup": round(interval.mean, 4) if interval else (round(speedups[0], 4) if speedups else None),
        "speedup_log_std": round(interval.log_std, 4) if interval else None,
        "speedup_n": len(speedups),
        "speedup_ci_low": round(interval.low, 4) if interval else None,
        "speedup_ci_high": round(interval.high, 4) if interval else None,
        "confidence": CONFIDENCE,
        **judged.row_fields(),
        "rounds": rounds.round_rows(),
    }
    per_prompt = rounds.per_prompt()
    if per_prompt is not None:
        row["per_prompt"] = per_prompt
    per_category = _by_category(categories, per_prompt)
    if per_category is not None:
        row["by_category"] = per_category
    return row


def _by_category(
    categories: Sequence[str | None], per_prompt: list[dict[str, int | None]] | None
) -> dict[str, dict[str, Any]] | None:
    """meta_info's accept length per prompt category over every speculative round (categories[i] is
    prompt i's); None without categories, or when the rounds' records do not line up with the prompts."""
    if per_prompt is None or not any(categories) or len(per_prompt) != len(categories):
        return None
    pairs = zip(categories, per_prompt, strict=True)
    return by_category([PromptTally(c, r["completion_tokens"] or 0, r["spec_verify_ct"]) for c, r in pairs])


def rejected_row(config: SpecConfig, smoke: dict[str, Any]) -> dict[str, Any]:
    """A config its smoke test refused: nothing measured, the smoke report kept (the gate names it)."""
    return {
        **_identity(config),
        **dict.fromkeys(_POOLED_FIELDS),
        "server_accept_len": None,
        "baseline_tok_s": None,
        "speedup": None,
        "speedup_log_std": None,
        "speedup_n": 0,
        "speedup_ci_low": None,
        "speedup_ci_high": None,
        "confidence": CONFIDENCE,
        "outputs_match": None,
        "outputs_identical": None,
        "mismatched_requests": None,
        "divergences": None,
        "rejected": {"stage": "smoke", **smoke},
        "rounds": [],
    }


def _identity(config: SpecConfig) -> dict[str, Any]:
    """What names a config's row: its label, and its shape field by field."""
    return {
        "config": config.label,
        "label": config.label,
        "depth": config.steps,  # the dashboard's x axis (steps; a chain's depth)
        "steps": config.steps,
        "topk": config.topk,
        "draft_tokens": config.draft_tokens,
    }


def judge_outputs(rounds: ConfigRounds, judge: SweepJudge) -> JudgedOutputs:
    """Every round's greedy outputs against the baseline batch of the same round, request by request (ids
    where both have them, else text); failed requests are left to the gate's own reason."""
    pairs: list[OutputPair] = []
    compared = True
    for number, (base, spec) in enumerate(zip(rounds.baseline, rounds.speculative, strict=True), start=1):
        if len(base.records) != len(spec.records):
            compared = False
            continue
        for ours, theirs in zip(base.records, spec.records, strict=True):
            with_ids = bool(ours.output_ids and theirs.output_ids)
            if not with_ids and (ours.text is None or theirs.text is None):
                continue
            pairs.append(
                OutputPair(
                    ours.index,
                    number,
                    tuple(ours.output_ids or ()) if with_ids else None,
                    tuple(theirs.output_ids or ()) if with_ids else None,
                    ours.text,
                    theirs.text,
                    theirs.prompt_tokens,
                )
            )
    rounds.judged = judge.judge(pairs, compared=compared)
    return rounds.judged


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
    rows: Sequence[dict[str, Any]], chosen: SpecConfig | None, threshold: float
) -> dict[str, Any]:
    """Deployable only when no config's output is a real loss against the baseline's (near-ties accepted;
    bit for bit where the target could not judge), no request failed, and the chosen config's speedup is
    above the threshold with 95 % confidence (its interval's lower bound)."""
    speculative = [r for r in rows if r["config"] is not None]
    reasons = [reason for r in speculative for reason in _output_reasons(r)]
    reasons += [
        f"{r['label']}: {r['failed_requests']} request(s) failed" for r in rows if r["failed_requests"]
    ]
    label = chosen.label if chosen is not None else best_config(rows)
    row = next((r for r in speculative if r["config"] == label and not r.get("rejected")), None)
    judged = _judge_speedup(label, row, threshold)
    if not judged["passes"]:
        reasons.append(judged["text"])
    required = threshold > 0
    if reasons:
        verdict = "not deployable: " + "; ".join(reasons)
    else:
        verdict = f"{'deployable' if required else 'no speedup required'} at {label}: {judged['text']}"
    counted = [r for r in speculative if r.get("divergences")]
    return {
        "deployable": not reasons,
        "speedup_required": required,
        "chosen_config": label,
        "chosen_depth": row["steps"] if row else None,
        "speedup": row["speedup"] if row else None,
        "speedup_ci_low": row["speedup_ci_low"] if row else None,
        "speedup_ci_high": row["speedup_ci_high"] if row else None,
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


def _judge_speedup(label: str | None, row: dict[str, Any] | None, threshold: float) -> dict[str, Any]:
    if row is None:
        return {"passes": False, "text": f"{label}: no speedup was measured"}
    low, mean, n = row["speedup_ci_low"], row["speedup"], row["speedup_n"]
    if low is None:
        return {
            "passes": False,
            "text": f"{label}: speedup {mean} from {n} round(s) has no confidence interval",
        }
    interval = f"mean {mean}, {CONFIDENCE * 100:g} % CI {low}–{row['speedup_ci_high']}, n {n}"
    if threshold <= 0:
        # No speedup required (a CPU demo, whose reference engine is slower than plain decoding): the gate
        # judges outputs only, and the verdict says what was measured rather than calling it a pass.
        slower = " (slower than the baseline)" if row["speedup_ci_high"] < 1 else ""
        return {"passes": True, "text": f"threshold {threshold}; measured speedup {interval}{slower}"}
    if low <= threshold:
        text = f"{label}: the speedup's lower bound {low} is not above the threshold {threshold} ({interval})"
        return {"passes": False, "text": text}
    return {
        "passes": True,
        "text": f"the speedup's lower bound {low} is above the threshold {threshold} ({interval})",
    }


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The comparison table as text, for the job log."""
    header = ["run", *TABLE_FIELDS[1:]]
    lines = [header] + [[row["label"], *(_cell(row.get(k)) for k in TABLE_FIELDS[1:])] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):  # divergences: near-ties / real losses / unscored
        counts = (value.get(key, 0) for key in ("near_tie", "real_loss", "unscored"))
        return "{} tie, {} loss, {} unscored".format(*counts)
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
