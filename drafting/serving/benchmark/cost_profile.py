"""A short measured cost profile of the sweep's servers, and the speedup it predicts (contract/speed_model).

Measured against the launched server itself, as it serves: SGLang with CUDA graphs on (or the reference
engine on a CPU host, so the path is tested here). Per server and concurrency b, one wave of b requests in
flight (the first b prompts, repeated where there are fewer), from a flushed cache:

- time to first token (the prefill), the median over the wave, from the streamed first chunk;
- time per step = Σ (e2e − ttft) / Σ steps, where a baseline's steps are its decode steps (completion
  tokens − 1) and a speculative server's its verify cycles (meta_info's spec_verify_ct);
- a speculative server's tokens per step (its measured acceptance on the wave; informative only).

Why this and not a profile of the model in torch: the costs that decide a speedup are those of the server's
own kernels and CUDA graphs, which only the server runs. In SGLang 0.5.14 a cycle is
speculative/eagle_worker_v2.py's draft() (the draft steps, replayed by
eagle_draft_cuda_graph_runner.EAGLEDraftCudaGraphRunner), verify() (the target over the draft tokens in
TARGET_VERIFY mode, replayed by model_executor/runner/decode_cuda_graph_runner.DecodeCudaGraphRunner, which
also replays the baseline's DECODE steps) and _draft_extend_for_decode() (replayed by
eagle_draft_extend_cuda_graph_runner.EAGLEDraftExtendCudaGraphRunner), one graph per batch size each.
Timing /generate against the server measures exactly those, with nothing but its HTTP API, on any release.
For chains, a line through the depths profiled splits a cycle into one draft step and the rest (verify of
the draft tokens + extend), and predicts the depths not profiled.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from contract.params.benchmark import BenchmarkParams, SpecConfig
from contract.speed_model import StepCost, chain_depth, fit_chain, predict_from_profile
from drafting.context import StageContext
from drafting.serving.benchmark import load_client
from drafting.serving.benchmark.benchmarking import Log, flush
from drafting.serving.benchmark.load_client import LoadOptions
from drafting.serving.prompts import Prompt

METHOD = (
    "one wave of b requests in flight per server and concurrency, from a flushed cache: prefill = median "
    "time to first token; step = Σ(e2e − ttft) / Σ steps (decode steps for the baseline, verify cycles "
    "for a speculative server); predicted speedup = (prefill + (N−1)·decode_step) / (prefill + N/τ·cycle)"
)


def measure_wave(
    url: str, prompts: Sequence[Prompt], options: LoadOptions, concurrency: int, *, log: Log
) -> StepCost | None:
    """One server's cost at `concurrency` (None when no request of the wave decoded two tokens)."""
    flush(url.rstrip("/"), log)
    wave = [prompts[i % len(prompts)] for i in range(concurrency)]
    records, _ = load_client.run_load(url.rstrip("/"), wave, replace(options, concurrency=concurrency))
    done = [r for r in records if r.error is None and r.completion_tokens > 1]
    if not done:
        return None
    ttft = [r.ttft_s for r in done if r.ttft_s is not None]
    prefill = statistics.median(ttft) if len(ttft) == len(done) else 0.0
    decoding = sum(r.e2e_s - (r.ttft_s or 0.0) for r in done)
    verify = [r.spec_verify_ct for r in done]
    if all(v for v in verify):
        steps = sum(v or 0 for v in verify)
        tokens_per_step = sum(r.completion_tokens for r in done) / steps
    else:
        steps = sum(r.completion_tokens - 1 for r in done)
        tokens_per_step = 1.0
    return StepCost(prefill, decoding / steps, tokens_per_step) if steps else None


@dataclass
class CostProfile:
    """The profile a sweep (or a profile run) gathers: {concurrency: baseline cost, {config: cycle cost}}."""

    new_tokens: int
    baseline: dict[int, StepCost] = field(default_factory=dict)
    configs: dict[int, dict[str, StepCost]] = field(default_factory=dict)

    def measure(
        self,
        url: str,
        prompts: Sequence[Prompt],
        options: LoadOptions,
        levels: Sequence[int],
        label: str | None,
        *,
        log: Log,
    ) -> None:
        """Profile one server (label None: the baseline) at every concurrency."""
        for level in levels:
            cost = measure_wave(url, prompts, options, level, log=log)
            if cost is None:
                log(f"{label or 'baseline'}: no request of the profile wave at {level} decoded: not profiled")
                continue
            if label is None:
                self.baseline[level] = cost
            else:
                self.configs.setdefault(level, {})[label] = cost
            what = "decode step" if label is None else "verify cycle"
            log(
                f"cost profile, {label or 'baseline'} at concurrency {level}: prefill "
                f"{cost.prefill_s * 1000:.1f} ms, {what} {cost.step_s * 1000:.2f} ms"
            )

    def as_dict(self) -> dict[str, Any]:
        levels = sorted(set(self.baseline) | set(self.configs))
        return {
            "method": METHOD,
            "new_tokens": self.new_tokens,
            "by_concurrency": [self._level(level) for level in levels],
        }

    def _level(self, level: int) -> dict[str, Any]:
        configs = self.configs.get(level, {})
        chains = {d: cost.step_s for label, cost in configs.items() if (d := chain_depth(label)) is not None}
        fit = fit_chain(chains)
        prefills = [cost.prefill_s for cost in configs.values()]
        base = self.baseline.get(level)
        return {
            "concurrency": level,
            "baseline": base.as_dict() if base else None,
            "configs": {label: cost.as_dict() for label, cost in configs.items()},
            "chain_fit": fit.as_dict() if fit else None,
            "speculative_prefill_ms": round(statistics.mean(prefills) * 1000, 4) if prefills else None,
        }


def predictions(
    profile: Mapping[str, Any], accept_lengths: Mapping[int, float], labels: Sequence[str]
) -> list[dict[str, Any]]:
    """The speedup each chain depth with an acceptance length is predicted to give at each concurrency
    profiled (the configs given and any other depth the chain fit reaches)."""
    new_tokens = int(profile.get("new_tokens") or 0)
    depths: dict[int, str] = {}
    for label in labels:
        if (depth := chain_depth(label)) is not None:
            depths[depth] = label
    for depth in accept_lengths:
        depths.setdefault(depth, f"{depth},1,{depth + 1}")
    rows = []
    for entry in profile.get("by_concurrency") or []:
        for depth, label in sorted(depths.items()):
            tau = accept_lengths.get(depth)
            if tau is None:
                continue
            predicted = predict_from_profile(profile, label, entry["concurrency"], tau, new_tokens)
            rows.append(
                {
                    "config": label,
                    "concurrency": entry["concurrency"],
                    "accept_len": tau,
                    "predicted_speedup": None if predicted is None else round(predicted, 4),
                    "cycle": "measured" if label in (entry.get("configs") or {}) else "chain fit",
                }
            )
    return rows


def annotate(
    rows: Sequence[dict[str, Any]], profile: Mapping[str, Any], accept_lengths: Mapping[int, float] | None
) -> None:
    """Beside each measured speedup (every level of every config row): `predicted_speedup` from the given
    acceptance lengths (train's, for chains) and `modelled_speedup` from the acceptance the level served,
    both through the profile, so a prediction's error separates acceptance from cost."""
    new_tokens = int(profile.get("new_tokens") or 0)
    for row in rows:
        label = row.get("config")
        if label is None or row.get("rejected"):
            continue
        depth = chain_depth(label)
        tau = (accept_lengths or {}).get(depth) if depth is not None else None
        for entry in row.get("by_concurrency") or []:
            level = entry["concurrency"]
            predicted = predict_from_profile(profile, label, level, tau, new_tokens) if tau else None
            served = entry.get("accept_len")
            modelled = predict_from_profile(profile, label, level, served, new_tokens) if served else None
            entry["predicted_speedup"] = None if predicted is None else round(predicted, 4)
            entry["modelled_speedup"] = None if modelled is None else round(modelled, 4)
            if level == row.get("concurrency"):
                row["predicted_speedup"], row["modelled_speedup"] = (
                    entry["predicted_speedup"],
                    entry["modelled_speedup"],
                )
        row["predicted_from"] = f"accept_lengths[{depth}] = {tau}" if tau else None


class Profiler(Protocol):
    """What a profile run needs of the sweep's servers (drafting/serving/benchmark/sweep.py's _Sweep)."""

    profile: CostProfile

    def profile_only(self, configs: Sequence[SpecConfig]) -> list[dict[str, Any]]: ...

    def release(self) -> None: ...


def profile_run(
    ctx: StageContext,
    params: BenchmarkParams,
    configs: Sequence[SpecConfig],
    servers: Profiler,
    about: dict[str, Any],
) -> dict[str, Any]:
    """Profile mode: each server alone, one wave per concurrency (its smoke test first, per params.smoke),
    then the speedup predicted for each chain depth with an acceptance length (params.accept_lengths)."""
    try:
        refused = servers.profile_only(configs)
    finally:
        servers.release()
    profile = servers.profile.as_dict()
    predicted = predictions(profile, params.accept_lengths or {}, [c.label for c in configs])
    for row in predicted:
        ctx.log(
            f"predicted: {row['config']} at concurrency {row['concurrency']}: {row['predicted_speedup']}x "
            f"(acceptance {row['accept_len']}, {row['cycle']} cycle)"
        )
    ctx.progress(1.0, "profile done")
    return {
        **about,
        "cost_profile": profile,
        "predictions": predicted,
        "refused": refused,
        "concurrencies": params.sweep_concurrencies(),
    }
