"""Depth sweep: a no-speculation baseline, then each depth; a comparison table and the release gate."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contract.params.benchmark import BenchmarkParams
from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.serving.benchmarking import BenchmarkRun, benchmark_server, load_options
from drafting.serving.lifecycle import checked_launch, launched_server
from drafting.serving.load_client import RequestRecord
from drafting.serving.prompts import Prompt
from drafting.serving.smoke import SmokeOptions, SweepSmoke
from drafting.stages.base import StageContext, StageError

GPU_RELEASE_TIMEOUT_S = 30.0
TABLE_FIELDS = (
    "depth",
    "accept_len",
    "output_tok_s",
    "speedup",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "outputs_match",
)


@dataclass
class SweepRun:
    depth: int | None  # None: the baseline, no speculation
    run: BenchmarkRun


def run_sweep(ctx: StageContext, params: BenchmarkParams, prompts: Sequence[Prompt]) -> dict[str, Any]:
    assert params.launch is not None
    runs: list[SweepRun] = []
    plan: list[int | None] = [None, *params.depths]
    smoke = _smoke(params)
    for number, depth in enumerate(plan):
        ctx.check_cancelled()
        ctx.progress(number / len(plan), f"{_label(depth)}: launching")
        runs.append(SweepRun(depth, _launch_and_measure(ctx, params, prompts, depth, smoke)))
        ctx.sink.emit({"type": "benchmark_row", **comparison_rows(runs)[-1]})
    rows = comparison_rows(runs)
    gate = release_gate(rows, params.chosen_depth, params.speedup_threshold)
    ctx.progress(1.0, "sweep done")
    return {
        "rows": rows,
        "gate": gate,
        "runs": [{"depth": r.depth, **r.run.as_dict()} for r in runs],
    }


def _smoke(params: BenchmarkParams) -> SweepSmoke | None:
    """The load smoke test every server of the sweep passes before it is measured (params.smoke)."""
    if not params.smoke or params.launch is None:
        return None
    options = SmokeOptions(min_accept_length=params.smoke_min_accept_length, scorer_device="cpu")
    return SweepSmoke(params.launch.model, options)


def _launch_and_measure(
    ctx: StageContext,
    params: BenchmarkParams,
    prompts: Sequence[Prompt],
    depth: int | None,
    smoke: SweepSmoke | None = None,
) -> BenchmarkRun:
    assert params.launch is not None
    spec: LaunchParams = params.launch.model_copy(
        update={"depth": depth, "draft": params.launch.draft if depth else None, "dry_run": False}
    )
    rendered = checked_launch(ctx, spec)
    with launched_server(ctx, spec, rendered) as server:
        if smoke is not None:
            smoke.check(ctx, server, depth)  # raises a StageError: the job fails before any measurement
        ctx.log(f"{_label(depth)}: ready after {server.ready_after_s:.1f} s; benchmarking")
        measured = benchmark_server(
            server.url,
            prompts,
            load_options(params),
            warmup_requests=params.warmup_requests,
            timing=params.timing,
            log=ctx.log,
        )
    if ctx.gpus:
        _wait_gpus_clean(ctx)
    return measured


def _wait_gpus_clean(ctx: StageContext) -> None:
    """The next launch needs the GPUs back: the GPU gate, retried while the driver releases memory."""
    from drafting.hostinfo import gate

    deadline = time.monotonic() + GPU_RELEASE_TIMEOUT_S
    while True:
        verdict = gate.check(list(ctx.gpus))
        if verdict.clean:
            return
        if time.monotonic() > deadline:
            raise StageError(
                "GPUs not clean after stopping the server: " + "; ".join(verdict.problems),
                reason=TerminationReason.GPU_NOT_CLEAN,
                details=verdict.to_dict(),
            )
        time.sleep(1.0)


def _label(depth: int | None) -> str:
    return "baseline (no speculation)" if depth is None else f"depth {depth}"


def comparison_rows(runs: Sequence[SweepRun]) -> list[dict[str, Any]]:
    baseline = next((r.run for r in runs if r.depth is None), None)
    base_speed = baseline.summary.get("output_tok_s") if baseline else None
    rows = []
    for entry in runs:
        summary = entry.run.summary
        speed = summary.get("output_tok_s")
        match, mismatched = (
            (None, None) if baseline is None else outputs_match(baseline.records, entry.run.records)
        )
        rows.append(
            {
                "depth": entry.depth,
                "label": _label(entry.depth),
                **{k: summary.get(k) for k in TABLE_FIELDS if k in summary},
                "speedup": round(speed / base_speed, 4) if speed and base_speed else None,
                "outputs_match": match,
                "mismatched_requests": mismatched,
                "server_accept_len": summary.get("server_accept_len"),
                "request_throughput": summary.get("request_throughput"),
                "failed_requests": summary.get("failed_requests"),
                "timing": summary.get("timing"),
            }
        )
    return rows


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


def release_gate(
    rows: Sequence[dict[str, Any]], chosen_depth: int | None, threshold: float
) -> dict[str, Any]:
    """Deployable only when every speculative output equals the baseline's and the chosen depth is faster."""
    speculative = [r for r in rows if r["depth"] is not None]
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
    if chosen_depth is None and speculative:
        chosen_depth = max(speculative, key=lambda r: r["output_tok_s"] or 0.0)["depth"]
    chosen = next((r for r in speculative if r["depth"] == chosen_depth), None)
    speedup = chosen["speedup"] if chosen else None
    if speedup is None or speedup <= threshold:
        reasons.append(f"depth {chosen_depth}: speedup {speedup} is not above the threshold {threshold}")
    return {
        "deployable": not reasons,
        "chosen_depth": chosen_depth,
        "speedup": speedup,
        "threshold": threshold,
        "reasons": reasons,
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
