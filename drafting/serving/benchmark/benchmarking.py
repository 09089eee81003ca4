"""Benchmark one ready server: flush, warm up, flush, send the prompt set, summarize, read /server_info.

A sweep warms a server once (`warm_up`) and then measures it in several rounds (`measure_batch`), each
starting from a flushed cache so every round sees the same conditions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from contract.params.benchmark import BenchmarkParams
from drafting.serving.benchmark.bench_stats import summarize
from drafting.serving.benchmark.load_client import LoadOptions, RequestRecord, run_load
from drafting.serving.prompts import Prompt

Log = Callable[[str], None]


@dataclass
class BenchmarkRun:
    summary: dict[str, Any]
    records: list[RequestRecord]

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary, "per_request": [r.row() for r in self.records]}


def load_options(params: BenchmarkParams) -> LoadOptions:
    return LoadOptions(
        max_new_tokens=params.max_new_tokens,
        concurrency=params.concurrency,
        stream=params.timing != "e2e",
        send_as=params.send_as,
        ignore_eos=params.ignore_eos,
        timeout_s=params.request_timeout_s,
    )


def benchmark_server(
    url: str, prompts: Sequence[Prompt], options: LoadOptions, *, warmup_requests: int, timing: str, log: Log
) -> BenchmarkRun:
    options = warm_up(url, prompts, options, warmup_requests=warmup_requests, timing=timing, log=log)
    log(f"benchmark: {len(prompts)} prompts at concurrency {options.concurrency} against {url}")
    return measure_batch(url, prompts, options, log=log)


def warm_up(
    url: str, prompts: Sequence[Prompt], options: LoadOptions, *, warmup_requests: int, timing: str, log: Log
) -> LoadOptions:
    """Send the warm-up requests; returns the options to measure with (no streaming where the server did
    not stream under timing auto)."""
    url = url.rstrip("/")
    if not (warmup_requests or timing == "auto"):
        return options
    flush(url, log)
    warmup = [prompts[i % len(prompts)] for i in range(max(warmup_requests, 1))]
    records, _ = run_load(url, warmup, replace(options, concurrency=1))
    _raise_on_errors(records, "warm-up")
    if timing == "auto" and options.stream and not all(r.streamed for r in records):
        log("the server did not stream: only e2e latency is measured (no TTFT/ITL)")
        return replace(options, stream=False)
    return options


def measure_batch(url: str, prompts: Sequence[Prompt], options: LoadOptions, *, log: Log) -> BenchmarkRun:
    """One measured batch from a flushed cache (the flush also resets SGLang's acceptance counters, so
    /server_info's acceptance afterwards is this batch's)."""
    url = url.rstrip("/")
    flush(url, log)
    records, wall = run_load(url, prompts, options)
    summary = summarize(records, wall)
    summary["server_accept_len"] = server_accept_len(url)
    return BenchmarkRun(summary, records)


def _raise_on_errors(records: Sequence[RequestRecord], what: str) -> None:
    failed = [r.error for r in records if r.error]
    if failed:
        raise RuntimeError(f"{what} request failed: {failed[0]}")


def flush(url: str, log: Log) -> None:
    """Reset the server's cache and spec counters (SGLang answers 400 while busy: then say so and go on)."""
    try:
        response = httpx.post(f"{url}/flush_cache", timeout=30)
    except httpx.HTTPError as exc:
        log(f"flush_cache failed: {exc}")
        return
    if response.status_code != 200:
        log(f"flush_cache answered {response.status_code}: {response.text.strip()[:200]}")


def server_accept_len(url: str) -> float | None:
    """/server_info's internal_states[0].avg_spec_accept_length (None where absent)."""
    try:
        info = httpx.get(f"{url}/server_info", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        return None
    states = info.get("internal_states") if isinstance(info, dict) else None
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("avg_spec_accept_length")
        return round(float(value), 4) if isinstance(value, int | float) else None
    return None
