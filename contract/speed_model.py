"""The speedup a speculative config should give, predicted from its acceptance length and a measured cost
profile of the host, before any sweep measures it.

A request of N new tokens (ignore_eos: every request decodes N) takes, on a server at b requests in flight,

    baseline:     prefill + (N − 1) · decode_step
    speculative:  prefill + (N / τ) · cycle

where `decode_step` is one target decode step, `cycle` one speculative cycle (the draft's steps, the
target's verify of the draft tokens, the draft's extend over the accepted ones) and τ the acceptance
length as SGLang counts it (completion tokens / verify steps, so N / τ cycles). The speedup is the ratio,
what the sweep measures pairwise (drafting/serving/benchmark/paired_speedup.py). Both step costs come from
the server itself at each concurrency (drafting/serving/benchmark/cost_profile.py), with CUDA graphs as it
runs them.

For chains (topk 1) the cycle grows with the depth d by one draft step and one more verified token; a
least-squares line cycle(d) = verify + d · draft_step through the chain depths profiled gives both parts,
and predicts depths that were not profiled (the verify of d + 1 tokens costs nearly the same at small
batches: its growth is folded into the slope).

The API (a pipeline's acceptance view) and the sweep both predict with it, so it lives in contract/.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepCost:
    """One server at one concurrency: its time to first token and its time per step (a decode step for a
    baseline, a verify cycle for a speculative server), and the tokens a step gave where it was measured."""

    prefill_s: float
    step_s: float
    tokens_per_step: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "prefill_ms": round(self.prefill_s * 1000, 4),
            "step_ms": round(self.step_s * 1000, 4),
            "tokens_per_step": None if self.tokens_per_step is None else round(self.tokens_per_step, 4),
        }

    @classmethod
    def from_dict(cls, value: Any) -> StepCost | None:
        """A stored profile entry, None for any other shape (a stored result must never break a read)."""
        if not isinstance(value, Mapping):
            return None
        prefill, step, tokens = value.get("prefill_ms"), value.get("step_ms"), value.get("tokens_per_step")
        if not isinstance(step, int | float) or not _positive(step):
            return None
        if not isinstance(prefill, int | float) or prefill < 0:
            return None
        return cls(prefill / 1000, step / 1000, tokens if isinstance(tokens, int | float) else None)


def _positive(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and math.isfinite(value)
    )


def predicted_speedup(accept_len: float, new_tokens: int, baseline: StepCost, cycle: StepCost) -> float:
    """The speedup of N-token requests at acceptance length τ (see the module doc)."""
    base = baseline.prefill_s + (new_tokens - 1) * baseline.step_s
    speculative = cycle.prefill_s + new_tokens / accept_len * cycle.step_s
    return base / speculative


@dataclass(frozen=True)
class ChainFit:
    """cycle(d) = verify_s + d · draft_step_s, fitted through the chain depths profiled at one concurrency."""

    verify_s: float
    draft_step_s: float
    depths: tuple[int, ...]

    def cycle_s(self, depth: int) -> float:
        return self.verify_s + depth * self.draft_step_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "verify_ms": round(self.verify_s * 1000, 4),
            "draft_step_ms": round(self.draft_step_s * 1000, 4),
            "depths": list(self.depths),
        }


def fit_chain(cycles: Mapping[int, float]) -> ChainFit | None:
    """The least-squares line through {depth: cycle seconds} of two or more chain depths (None with fewer,
    or where the cycles do not grow with depth: nothing to split)."""
    if len(cycles) < 2:
        return None
    depths = sorted(cycles)
    mean_d = sum(depths) / len(depths)
    mean_c = sum(cycles[d] for d in depths) / len(depths)
    spread = sum((d - mean_d) ** 2 for d in depths)
    slope = sum((d - mean_d) * (cycles[d] - mean_c) for d in depths) / spread
    if slope <= 0:
        return None
    return ChainFit(mean_c - slope * mean_d, slope, tuple(depths))


def chain_depth(label: str) -> int | None:
    """The depth of a chain config's label "d,1,d+1", None for a tree or another shape."""
    parts = label.split(",")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        return None
    steps, topk, tokens = (int(part) for part in parts)
    return steps if topk == 1 and tokens == steps + 1 else None


def predict_from_profile(
    profile: Mapping[str, Any], label: str, concurrency: int, accept_len: float, new_tokens: int
) -> float | None:
    """The predicted speedup of config `label` at `concurrency` from a stored cost profile (the sweep's
    `cost_profile`): its own measured cycle where it was profiled, else a chain depth's from the chain fit;
    None where the profile has neither (or no baseline at that concurrency)."""
    level = _level(profile, concurrency)
    if level is None or not _positive(accept_len) or new_tokens < 1:
        return None
    baseline = StepCost.from_dict(level.get("baseline"))
    configs = level.get("configs")
    cycle = StepCost.from_dict(configs.get(label)) if isinstance(configs, Mapping) else None
    if cycle is None:
        cycle = _fitted_cycle(level, label)
    if baseline is None or cycle is None:
        return None
    return predicted_speedup(accept_len, new_tokens, baseline, cycle)


def _level(profile: Mapping[str, Any], concurrency: int) -> Mapping[str, Any] | None:
    levels = profile.get("by_concurrency")
    if not isinstance(levels, list):
        return None
    found = next((e for e in levels if isinstance(e, Mapping) and e.get("concurrency") == concurrency), None)
    return found


def _fitted_cycle(level: Mapping[str, Any], label: str) -> StepCost | None:
    depth, fit = chain_depth(label), level.get("chain_fit")
    if depth is None or not isinstance(fit, Mapping):
        return None
    verify, draft = fit.get("verify_ms"), fit.get("draft_step_ms")
    prefill = level.get("speculative_prefill_ms")
    if not isinstance(draft, int | float) or not _positive(draft):
        return None
    if not isinstance(verify, int | float) or not isinstance(prefill, int | float):
        return None
    cycle_ms = verify + depth * draft
    return StepCost(prefill / 1000, cycle_ms / 1000) if cycle_ms > 0 else None
