"""Speedup statistics of a sweep: per-round ratios, their mean, and a Student-t confidence interval.

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
    """Mean speedup over n paired rounds, its sample standard deviation, and a two-sided t interval."""

    mean: float
    std: float
    n: int
    low: float
    high: float
    confidence: float = CONFIDENCE

    def as_dict(self) -> dict[str, Any]:
        return {
            "mean": round(self.mean, 4),
            "std": round(self.std, 4),
            "n": self.n,
            "ci_low": round(self.low, 4),
            "ci_high": round(self.high, 4),
            "confidence": self.confidence,
        }

    def describe(self) -> str:
        percent = f"{self.confidence * 100:g} %"
        return f"{self.mean:.3f}× ({percent} CI {self.low:.3f}–{self.high:.3f}, n {self.n})"


def speedup_interval(speedups: Sequence[float], confidence: float = CONFIDENCE) -> SpeedupInterval:
    """Mean ± t(1 - α/2, n - 1) · s / √n over per-round speedups (n ≥ 2: one round has no spread)."""
    n = len(speedups)
    if n < 2:
        raise ValueError(f"a confidence interval needs at least 2 rounds, got {n}")
    mean = math.fsum(speedups) / n
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in speedups) / (n - 1))
    half_width = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 1) * std / math.sqrt(n)
    return SpeedupInterval(mean, std, n, mean - half_width, mean + half_width, confidence)


def round_speedups(
    baseline_tok_s: Sequence[float | None], speculative_tok_s: Sequence[float | None]
) -> list[float]:
    """Per-round speedup = the speculative batch's tok/s over its paired baseline batch's (pairs where
    either is missing or zero are left out: a round whose batch failed measures nothing)."""
    return [
        spec / base
        for base, spec in zip(baseline_tok_s, speculative_tok_s, strict=True)
        if base and spec is not None and base > 0
    ]
