"""What a sweep reports: one row per server (the baseline, then each config) and a text table.

A config's speedup pairs each request's speculative run with the same request's baseline run (the ratio of
pooled paired throughputs, drafting/serving/benchmark/paired_speedup.py) with a 95 % interval over requests.
A config measured at several concurrencies has its row at the gate's concurrency and `by_concurrency` for
all of them (drafting/serving/benchmark/sweep_speed.py). The release gate
(drafting/serving/benchmark/sweep_gate.py) judges the rows.

Outputs: each request of each round is compared with the baseline batch's of the same round, and a divergence
is judged by the target at its first divergent position (drafting.serving.benchmark.sweep_judge.SweepJudge):
the gate fails a config on a real loss, accepts numerical near-ties (and counts them), reports divergences
past the scoring cap as `unscored` without judging them, and compares bit for bit where the target cannot
judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.params.benchmark import SpecConfig
from drafting.serving.benchmark.bench_stats import summarize
from drafting.serving.benchmark.benchmarking import BenchmarkRun
from drafting.serving.benchmark.paired_speedup import RequestPair, pair_records, paired_speedup
from drafting.serving.benchmark.speedup_stats import CONFIDENCE, round_speedups
from drafting.serving.benchmark.sweep_judge import JudgedOutputs, OutputPair, SweepJudge
from drafting.serving.benchmark.sweep_speed import level_entry, stops_paying_at
from drafting.serving.prompts.categories import PromptTally, by_category

BASELINE_LABEL = "baseline (no speculation)"
TABLE_FIELDS = (
    "config",
    "accept_len",
    "output_tok_s",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "speedup_n",
    "predicted_speedup",
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
    """A config's measured rounds at one concurrency: round i pairs baseline[i] with speculative[i] request
    by request, run in orders[i] (the side that went first, block by block)."""

    config: SpecConfig
    concurrency: int = 1
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

    def pairs(self) -> list[RequestPair]:
        return [
            pair
            for number, (base, spec) in enumerate(zip(self.baseline, self.speculative, strict=True), start=1)
            for pair in pair_records(base.records, spec.records, number)
        ]

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


def baseline_row(runs: Sequence[BenchmarkRun], concurrency: int = 1) -> dict[str, Any]:
    summary = pooled_summary(runs)
    return {
        "config": None,
        "concurrency": concurrency,
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


def config_row(
    rounds: ConfigRounds, categories: Sequence[str | None] = (), levels: Sequence[ConfigRounds] = ()
) -> dict[str, Any]:
    """A config's row at `rounds`' concurrency; with the prompts' categories, also its acceptance per
    category (`by_category`); with `levels` (its rounds at every concurrency measured), `by_concurrency`
    and `stops_paying_at`. Outputs are judged over every level's rounds (`rounds.judged`)."""
    if rounds.rejected is not None:
        return rejected_row(rounds.config, rounds.rejected)
    judged = rounds.judged or judge_outputs(rounds, SweepJudge(None, lambda _: None))
    row = {
        **_identity(rounds.config),
        **speed_fields(rounds),
        **judged.row_fields(),
        "rounds": rounds.round_rows(),
    }
    per_prompt = rounds.per_prompt()
    if per_prompt is not None:
        row["per_prompt"] = per_prompt
    per_category = _by_category(categories, per_prompt)
    if per_category is not None:
        row["by_category"] = per_category
    if levels:
        row["by_concurrency"] = [level_entry(speed_fields(level), level.concurrency) for level in levels]
        row["stops_paying_at"] = stops_paying_at(row["by_concurrency"])
    return row


def speed_fields(rounds: ConfigRounds) -> dict[str, Any]:
    """The pooled measurements and the paired speedup of a config's rounds at one concurrency."""
    summary = pooled_summary(rounds.speculative)
    pairs = rounds.pairs()
    paired = paired_speedup(pairs)
    if paired is not None:
        speed = paired.fields()
    else:  # one request (or none) has no spread: the batch ratio, without an interval
        speedups = rounds.speedups()
        speed = {**_NO_SPEEDUP, "speedup": round(speedups[0], 4) if speedups else None}
        speed |= {"speedup_n": len({pair.request for pair in pairs}), "speedup_pairs": len(pairs)}
    return {
        "concurrency": rounds.concurrency,
        **{key: summary.get(key) for key in _POOLED_FIELDS},
        "server_accept_len": summary.get("server_accept_len"),
        "baseline_tok_s": pooled_summary(rounds.baseline).get("output_tok_s"),
        **speed,
    }


_NO_SPEEDUP: dict[str, Any] = {
    "speedup": None,
    "speedup_ci_low": None,
    "speedup_ci_high": None,
    "speedup_half_width": None,
    "speedup_n": 0,
    "speedup_pairs": 0,
    "speedup_interval": None,
    "confidence": CONFIDENCE,
}


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
        **_NO_SPEEDUP,
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
