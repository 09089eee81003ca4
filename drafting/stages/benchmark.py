"""benchmark: acceptance and throughput of a ready server, or a config sweep with a release gate.

Single mode measures any URL speaking SGLang's API. Profile mode starts the sweep's servers one at a time
and measures their costs only, predicting each config's speedup before any sweep. Sweep mode launches a
no-speculation baseline and keeps it up beside one server per speculative config (same launch code and
checks as the launch stage), measures both request by request at each concurrency (drafting/serving/
sweep.py), and judges the drafter: deployable only when greedy outputs match the baseline's and the chosen
config's speedup is above the threshold with 95 % confidence (the interval's lower bound); otherwise it
fails with RELEASE_GATE_FAILED after emitting the table, so `eyas wait` exits non-zero, or with
RELEASE_GATE_INCONCLUSIVE where the outputs pass but the speedup's interval is too wide to call (the
verdict says how many more requests would decide).
"""

from __future__ import annotations

from typing import Any

from contract.params.benchmark import BenchmarkParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.serving.benchmark.benchmarking import benchmark_server, load_options
from drafting.serving.benchmark.load_client import requests_digest
from drafting.serving.benchmark.sweep import format_table, run_sweep
from drafting.serving.prompts import Prompt
from drafting.serving.prompts.categories import benchmark_prompt_report
from drafting.serving.prompts.chat_source import benchmark_tokenizer_folder
from drafting.stages.prompt_sets import stage_prompts


def run(ctx: StageContext, params: BenchmarkParams) -> dict[str, Any]:
    prompts, note = stage_prompts(
        ctx, params.prompts, params.max_prompts, chat_template_from=benchmark_tokenizer_folder(params)
    )
    digest = requests_digest(prompts, load_options(params))
    if params.mode == "single":
        assert params.url is not None
        try:
            measured = benchmark_server(
                params.url,
                prompts,
                load_options(params),
                warmup_requests=params.warmup_requests,
                timing=params.timing,
                log=ctx.log,
            )
        except RuntimeError as exc:
            raise StageError(str(exc), reason=TerminationReason.SERVER_DIED) from exc
        ctx.log(f"result: {_headline(measured.summary)}")
        about = benchmark_prompt_report(params.prompts, prompts, measured.records, note, digest)
        return {"mode": "single", "url": params.url, **measured.as_dict(), **about}
    about = benchmark_prompt_report(params.prompts, prompts, None, note, digest)
    if params.mode == "profile":
        # the servers' cost profile and the speedup it predicts (drafting/serving/benchmark/cost_profile.py)
        return {"mode": "profile", **run_sweep(ctx, params, prompts), **about}
    return _sweep(ctx, params, prompts, about)


def _sweep(
    ctx: StageContext, params: BenchmarkParams, prompts: list[Prompt], about: dict[str, Any]
) -> dict[str, Any]:
    """The sweep's result says what it asked (`prompt_set`, with the requests' digest) whether or not the
    gate passes: a failed gate's table is still compared with another draft's (GET /v1/benchmarks/compare)."""
    result = run_sweep(ctx, params, prompts) | about
    ctx.log("config sweep:\n" + format_table(result["rows"]))
    gate = result["gate"]
    ctx.sink.emit({"type": "benchmark_table", "rows": result["rows"], "gate": gate})
    if not gate["deployable"]:
        ctx.log("release gate: " + gate["verdict"])
        inconclusive = gate.get("outcome") == "inconclusive"
        raise StageError(
            ("release gate inconclusive: " if inconclusive else "release gate failed: ")
            + "; ".join(gate["reasons"]),
            reason=TerminationReason.RELEASE_GATE_INCONCLUSIVE
            if inconclusive
            else TerminationReason.RELEASE_GATE_FAILED,
            details={"mode": "sweep", **result},
        )
    ctx.log("release gate: " + gate["verdict"])
    return {"mode": "sweep", **result}


def _headline(summary: dict[str, Any]) -> str:
    keys = ("accept_len", "output_tok_s", "request_throughput", "ttft_p50_ms", "itl_p50_ms", "timing")
    return ", ".join(f"{k} {summary.get(k)}" for k in keys)
