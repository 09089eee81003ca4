"""What a sweep reports: one row per server (the baseline, then each config), the release gate, a text table.

A config's speedup is the mean of its per-round ratios (the speculative batch's tok/s over the baseline batch
paired with it), with a Student-t 95 % interval; the gate judges the interval's lower bound, so a config whose
mean clears the threshold only by noise is not deployable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.params.benchmark import SpecConfig
from drafting.serving.bench_stats import summarize
from drafting.serving.benchmarking import BenchmarkRun
from drafting.serving.load_client import RequestRecord
from drafting.serving.speedup_stats import CONFIDENCE, SpeedupInterval, round_speedups, speedup_interval

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

    def speedups(self) -> list[float]:
        return round_speedups(
            [run.summary.get("output_tok_s") for run in self.baseline],
            [run.summary.get("output_tok_s") for run in self.speculative],
        )

    def interval(self) -> SpeedupInterval | None:
        speedups = self.speedups()
        return speedup_interval(speedups) if len(speedups) >= 2 else None

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
        "mismatched_requests": None,
    }


def config_row(rounds: ConfigRounds) -> dict[str, Any]:
    config = rounds.config
    summary = pooled_summary(rounds.speculative)
    interval = rounds.interval()
    speedups = rounds.speedups()
    match, mismatched = _outputs_match_over_rounds(rounds)
    return {
        "config": config.label,
        "label": config.label,
        "depth": config.steps,  # the dashboard's x axis (steps; a chain's depth)
        "steps": config.steps,
        "topk": config.topk,
        "draft_tokens": config.draft_tokens,
        **{key: summary.get(key) for key in _POOLED_FIELDS},
        "server_accept_len": summary.get("server_accept_len"),
        "baseline_tok_s": pooled_summary(rounds.baseline).get("output_tok_s"),
        "speedup": round(interval.mean, 4) if interval else (round(speedups[0], 4) if speedups else None),
        "speedup_std": round(interval.std, 4) if interval else None,
        "speedup_n": len(speedups),
        "speedup_ci_low": round(interval.low, 4) if interval else None,
        "speedup_ci_high": round(interval.high, 4) if interval else None,
        "confidence": CONFIDENCE,
        "outputs_match": match,
        "mismatched_requests": mismatched,
        "rounds": rounds.round_rows(),
    }


def _outputs_match_over_rounds(rounds: ConfigRounds) -> tuple[bool | None, int | None]:
    """Greedy outputs of every round against the baseline batch of the same round."""
    pairs = zip(rounds.baseline, rounds.speculative, strict=True)
    verdicts = [outputs_match(base.records, spec.records) for base, spec in pairs]
    if not verdicts or any(match is None for match, _ in verdicts):
        return None, None
    mismatched = sum(count or 0 for _, count in verdicts)
    return mismatched == 0, mismatched


def outputs_match(
    baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord]
) -> tuple[bool | None, int | None]:
    """Greedy outputs request by request: ids where both have them, else text; None if nothing to compare."""
    compared = mismatched = 0
    for base, other in zip(baseline, candidate, strict=False):
        if base.output_ids and other.output_ids:
            same = base.output_ids == other.output_ids
        elif base.text is not None and other.text is not None:
            same = base.text == other.text
        else:
            continue
        compared += 1
        mismatched += not same
    if compared == 0 or len(baseline) != len(candidate):
        return None, None
    return mismatched == 0, mismatched


def best_config(rows: Sequence[dict[str, Any]]) -> str | None:
    """The config with the highest speedup lower bound (the mean where no interval exists)."""
    speculative = [row for row in rows if row["config"] is not None]
    if not speculative:
        return None
    return str(max(speculative, key=_lower_bound)["config"])


def _lower_bound(row: dict[str, Any]) -> float:
    value = row.get("speedup_ci_low")
    return float(value) if value is not None else -math.inf


def release_gate(
    rows: Sequence[dict[str, Any]], chosen: SpecConfig | None, threshold: float
) -> dict[str, Any]:
    """Deployable only when every speculative output equals the baseline's, no request failed, and the
    chosen config's speedup is above the threshold with 95 % confidence (its interval's lower bound)."""
    speculative = [r for r in rows if r["config"] is not None]
    reasons = [
        f"{r['label']}: greedy outputs differ from the baseline's"
        for r in speculative
        if r["outputs_match"] is False
    ]
    reasons += [
        f"{r['label']}: outputs could not be compared" for r in speculative if r["outputs_match"] is None
    ]
    reasons += [
        f"{r['label']}: {r['failed_requests']} request(s) failed" for r in rows if r["failed_requests"]
    ]
    label = chosen.label if chosen is not None else best_config(rows)
    row = next((r for r in speculative if r["config"] == label), None)
    judged = _judge_speedup(label, row, threshold)
    if not judged["passes"]:
        reasons.append(judged["text"])
    verdict = (
        f"deployable at {label}: {judged['text']}" if not reasons else "not deployable: " + "; ".join(reasons)
    )
    return {
        "deployable": not reasons,
        "chosen_config": label,
        "chosen_depth": row["steps"] if row else None,
        "speedup": row["speedup"] if row else None,
        "speedup_ci_low": row["speedup_ci_low"] if row else None,
        "speedup_ci_high": row["speedup_ci_high"] if row else None,
        "confidence": CONFIDENCE,
        "threshold": threshold,
        "judged_on": "speedup_ci_low",
        "verdict": verdict,
        "reasons": reasons,
    }


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
        # No speedup asked for (a CPU demo, whose reference engine is slower than plain decoding): a ratio is
        # positive whatever its interval says, and a t interval of few noisy rounds can reach below 0.
        return {"passes": True, "text": f"no speedup asked for (threshold {threshold}); speedup {interval}"}
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
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
