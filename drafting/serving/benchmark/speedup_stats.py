"""Speedup statistics of a sweep: per-round ratios, their geometric mean, and a Student-t confidence interval.

A speedup is a ratio, so the interval is computed on its logarithm and mapped back: mean and t interval of
ln(speculative tok/s / baseline tok/s), exponentiated. Its bounds are then always positive (a t interval on
the ratios themselves reached below zero on a few noisy rounds: a "negative speedup"), and a halving and a
doubling are equally far from 1. The point estimate is the geometric mean, which always lies inside.

Pure functions, no scipy: the t quantile is computed from the regularized incomplete beta function
(Lentz's continued fraction, as in Numerical Recipes §6.4) and inverted by bisection, exact to ~1e-9.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95
_CF_EPS = 1e-15
_CF_TINY = 1e-300
_CF_MAX_TERMS = 300


def _incomplete_beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz); converges fast for x < (a + 1) / (a + b + 2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
    result = d
    for m in range(1, _CF_MAX_TERMS + 1):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _CF_TINY else _CF_TINY
            result *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            break
    return result


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the CDF of a Beta(a, b) variable at x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _incomplete_beta_fraction(a, b, x) / a
    return 1.0 - front * _incomplete_beta_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p (e.g. p 0.975, df 4 → 2.776), by bisection on the CDF."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, not {df}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:  # df 1 at p 0.9995 needs ~637: doubling finds a bracket quickly
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if student_t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


@dataclass(frozen=True)
class SpeedupInterval:
    """Geometric-mean speedup over n paired rounds, the sample standard deviation of the rounds' log ratios,
    and a two-sided t interval computed on the log ratios and exponentiated (so 0 < low <= mean <= high)."""

    mean: float
    log_std: float
    n: int
    low: float
    high: float
    confidence: float = CONFIDENCE

    def as_dict(self) -> dict[str, Any]:
        return {
            "mean": round(self.mean, 4),
            "log_std": round(self.log_std, 4),
            "n": self.n,
            "ci_low": round(self.low, 4),
            "ci_high": round(self.high, 4),
            "confidence": self.confidence,
        }

    def describe(self) -> str:
        percent = f"{self.confidence * 100:g} %"
        return f"{self.mean:.3f}× ({percent} CI {self.low:.3f}–{self.high:.3f}, n {self.n})"


def speedup_interval(speedups: Sequence[float], confidence: float = CONFIDENCE) -> SpeedupInterval:
    """exp(m ± t(1 - α/2, n - 1) · s / √n), where m and s are the mean and sample standard deviation of the
    per-round ln(speedup) (n ≥ 2: one round has no spread; every speedup must be positive)."""
    n = len(speedups)
    if n < 2:
        raise ValueError(f"a confidence interval needs at least 2 rounds, got {n}")
    if any(not s > 0 for s in speedups):
        raise ValueError(f"speedups are ratios of positive rates, got {list(speedups)}")
    logs = [math.log(s) for s in speedups]
    mean = math.fsum(logs) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (n - 1))
    half_width = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 1) * std / math.sqrt(n)
    return SpeedupInterval(
        math.exp(mean), std, n, math.exp(mean - half_width), math.exp(mean + half_width), confidence
    )


def round_speedups(
    baseline_tok_s: Sequence[float | None], speculative_tok_s: Sequence[float | None]
) -> list[float]:
    """Per-round speedup = the speculative batch's tok/s over its paired baseline batch's (pairs where
    either is missing or zero are left out: a round whose batch failed measures nothing)."""
    return [
        spec / base
        for base, spec in zip(baseline_tok_s, speculative_tok_s, strict=True)
        if base and spec and base > 0 and spec > 0
    ]
