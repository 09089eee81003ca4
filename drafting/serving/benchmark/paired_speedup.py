"""A config's speedup from paired requests: each request's speculative run beside the same request's
baseline run, pooled, with an interval over requests that says when it decides.

The speedup is the ratio of the pooled per-request throughputs, (Σ tokens_spec / Σ seconds_spec) over
(Σ tokens_base / Σ seconds_base), each request's seconds its own end-to-end time (with ignore_eos both runs
decode the same tokens, so this is the ratio of the total times). Its 95 % interval resamples *requests*
(each with all its rounds, both sides together: contract/paired_interval.py, bootstrapped, the delta method
past 500 requests) and is computed on ln(speedup), so it is never negative and a halving and a doubling lie
equally far from 1. Pairing removes what the two runs of a request share (its prompt, its length, how well
its text drafts); what is left is the noise between runs and how the gain varies from request to request,
and many requests narrow it where a t interval over 2 rounds (t = 12.7) could not.

`half_width` is half the interval's width in speedup units, what the gate bounds (sweep_speed.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contract.paired_interval import CONFIDENCE, paired_interval
from drafting.serving.benchmark.load_client import RequestRecord


@dataclass(frozen=True)
class RequestPair:
    """One request of one round, measured on both servers."""

    request: int
    round: int
    baseline_tokens: int
    baseline_s: float
    speculative_tokens: int
    speculative_s: float


def pair_records(
    baseline: Sequence[RequestRecord], speculative: Sequence[RequestRecord], round_number: int
) -> list[RequestPair]:
    """The requests both servers answered in a round, matched by prompt index (a failed request, or one
    that produced no token, pairs with nothing)."""
    speculative_by_index = {record.index: record for record in speculative}
    pairs = []
    for ours in baseline:
        theirs = speculative_by_index.get(ours.index)
        if theirs is None or not _usable(ours) or not _usable(theirs):
            continue
        pairs.append(
            RequestPair(
                ours.index,
                round_number,
                ours.completion_tokens,
                ours.e2e_s,
                theirs.completion_tokens,
                theirs.e2e_s,
            )
        )
    return pairs


def _usable(record: RequestRecord) -> bool:
    return record.error is None and record.completion_tokens > 0 and record.e2e_s > 0


def log_speedup(sums: Sequence[float]) -> float:
    spec_tokens, spec_s, base_tokens, base_s = sums
    return math.log(spec_tokens / spec_s) - math.log(base_tokens / base_s)


@dataclass(frozen=True)
class PairedSpeedup:
    speedup: float
    low: float
    high: float
    requests: int  # the units resampled
    pairs: int  # request runs paired (requests x rounds)
    method: str

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def fields(self) -> dict[str, Any]:
        """A sweep row's speedup fields."""
        return {
            "speedup": round(self.speedup, 4),
            "speedup_ci_low": round(self.low, 4),
            "speedup_ci_high": round(self.high, 4),
            "speedup_half_width": round(self.half_width, 4),
            "speedup_n": self.requests,
            "speedup_pairs": self.pairs,
            "speedup_interval": self.method,
            "confidence": CONFIDENCE,
        }


def paired_speedup(pairs: Sequence[RequestPair], *, seed: int = 0) -> PairedSpeedup | None:
    """The pooled speedup of `pairs` with its interval over requests; None with fewer than 2 requests
    (one request has no spread to measure)."""
    by_request: dict[int, list[float]] = {}
    for pair in pairs:
        row = by_request.setdefault(pair.request, [0.0, 0.0, 0.0, 0.0])
        row[0] += pair.speculative_tokens
        row[1] += pair.speculative_s
        row[2] += pair.baseline_tokens
        row[3] += pair.baseline_s
    if len(by_request) < 2:
        return None
    rows = list(by_request.values())
    interval = paired_interval(rows, log_speedup, rng=random.Random(seed))
    method = (
        f"ratio of pooled paired throughputs; {interval.describe().replace('units', 'requests')}, on "
        "ln(speedup)"
    )
    return PairedSpeedup(
        math.exp(interval.estimate),
        math.exp(interval.low),
        math.exp(interval.high),
        len(rows),
        len(pairs),
        method,
    )
