"""The sweep's statistics against published values: t quantiles, log-ratio intervals, per-round ratios."""

from __future__ import annotations

import math
import statistics

import pytest

from drafting.serving.benchmark.speedup_stats import (
    regularized_incomplete_beta,
    round_speedups,
    speedup_interval,
    student_t_cdf,
    student_t_quantile,
)

# Two-sided 95 % critical values t(0.975, df), as printed in every t table (4 decimals).
T_975 = {
    1: 12.7062,
    2: 4.3027,
    3: 3.1824,
    4: 2.7764,
    5: 2.5706,
    6: 2.4469,
    9: 2.2622,
    10: 2.2281,
    20: 2.0860,
    29: 2.0452,
    30: 2.0423,
    60: 2.0003,
    120: 1.9799,
}


@pytest.mark.parametrize(("df", "expected"), sorted(T_975.items()))
def test_t_quantile_matches_the_table(df: int, expected: float) -> None:
    assert student_t_quantile(0.975, df) == pytest.approx(expected, abs=5e-5)


def test_t_quantile_at_other_levels_and_its_limits() -> None:
    assert student_t_quantile(0.95, 10) == pytest.approx(1.8125, abs=5e-5)
    assert student_t_quantile(0.995, 5) == pytest.approx(4.0321, abs=5e-5)
    assert student_t_quantile(0.9995, 1) == pytest.approx(636.619, abs=5e-3)
    assert student_t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5), "the normal value beyond"
    assert student_t_quantile(0.025, 4) == pytest.approx(-2.7764, abs=5e-5)
    assert student_t_quantile(0.5, 3) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="p must be"):
        student_t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="degrees of freedom"):
        student_t_quantile(0.975, 0)


def test_t_cdf_is_symmetric_and_has_closed_forms() -> None:
    # df 1 is the Cauchy distribution: F(t) = 1/2 + atan(t)/π; df 2: F(t) = 1/2 + t / (2 √(2 + t²)).
    for t in (-3.0, -0.5, 0.0, 0.7, 4.0):
        assert student_t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert student_t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
        assert student_t_cdf(t, 7) + student_t_cdf(-t, 7) == pytest.approx(1.0, abs=1e-12)


def test_incomplete_beta_known_values() -> None:
    assert regularized_incomplete_beta(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert regularized_incomplete_beta(2, 3, 0.4) == pytest.approx(0.5248)  # 1 - Σ binomial terms
    assert regularized_incomplete_beta(2, 3, 0.0) == 0.0
    assert regularized_incomplete_beta(2, 3, 1.0) == 1.0


def _log_interval(speedups: list[float], t: float) -> tuple[float, float, float, float]:
    """The interval by hand: mean and sample standard deviation of ln(speedup), exp(m ± t · s / √n)."""
    logs = [math.log(s) for s in speedups]
    m = sum(logs) / len(logs)
    s = math.sqrt(sum((x - m) ** 2 for x in logs) / (len(logs) - 1))
    half = t * s / math.sqrt(len(logs))
    return math.exp(m), s, math.exp(m - half), math.exp(m + half)


def test_interval_of_five_rounds_is_computed_on_the_log_ratio() -> None:
    speedups = [1.1, 1.2, 1.3, 1.0, 1.15]
    mean, log_std, low, high = _log_interval(speedups, T_975[4])
    interval = speedup_interval(speedups)
    assert interval.n == 5
    assert interval.mean == pytest.approx(mean, rel=1e-6)
    assert interval.mean == pytest.approx(math.prod(speedups) ** (1 / 5)), "the geometric mean"
    assert interval.log_std == pytest.approx(log_std, rel=1e-6)
    assert interval.low == pytest.approx(low, rel=1e-5)
    assert interval.high == pytest.approx(high, rel=1e-5)
    assert interval.low * interval.high == pytest.approx(interval.mean**2), "symmetric in the log"
    assert interval.as_dict() == {
        "mean": round(interval.mean, 4),
        "log_std": round(interval.log_std, 4),
        "n": 5,
        "ci_low": round(interval.low, 4),
        "ci_high": round(interval.high, 4),
        "confidence": 0.95,
    }
    assert interval.describe() == f"{mean:.3f}× (95 % CI {low:.3f}–{high:.3f}, n 5)"


def test_a_noisy_slowdown_never_gets_a_negative_bound() -> None:
    # Two rounds of a CPU demo that runs slower than plain decoding: a t interval on the ratios themselves
    # is 0.64 ± 12.7 · 0.34 / √2 = [-2.41, 3.69]; on the log ratio it stays positive.
    speedups = [0.4, 0.88]
    arithmetic = sum(speedups) / 2
    arithmetic_low = arithmetic - T_975[1] * statistics.stdev(speedups) / math.sqrt(2)
    assert arithmetic_low < 0, "the interval the old computation gave"
    interval = speedup_interval(speedups)
    assert 0 < interval.low < interval.mean < interval.high
    assert interval.mean == pytest.approx(math.sqrt(0.4 * 0.88))


def test_a_halving_and_a_doubling_are_equally_far_from_one() -> None:
    interval = speedup_interval([0.5, 2.0])
    assert interval.mean == pytest.approx(1.0)
    assert interval.low == pytest.approx(1 / interval.high)


def test_two_rounds_give_a_wide_interval_and_one_gives_none() -> None:
    interval = speedup_interval([1.2, 1.4])  # t(0.975, 1) = 12.7062
    _, _, low, high = _log_interval([1.2, 1.4], T_975[1])
    assert interval.low == pytest.approx(low, rel=1e-4)
    assert interval.high == pytest.approx(high, rel=1e-4)
    assert 0 < interval.low < 0.5 < 1.3 < 3.0 < interval.high
    with pytest.raises(ValueError, match="at least 2 rounds"):
        speedup_interval([1.2])


def test_a_ratio_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="ratios of positive rates"):
        speedup_interval([1.2, 0.0])


def test_identical_rounds_have_a_zero_width_interval() -> None:
    interval = speedup_interval([1.25, 1.25, 1.25])
    assert (interval.low, interval.high, interval.log_std) == (
        pytest.approx(1.25),
        pytest.approx(1.25),
        pytest.approx(0.0, abs=1e-12),
    )
    assert interval.mean == pytest.approx(1.25)


def test_round_speedups_pair_by_round_and_skip_rounds_that_measured_nothing() -> None:
    assert round_speedups([100.0, 200.0, None, 0.0, 50.0], [150.0, 200.0, 90.0, 80.0, None]) == [1.5, 1.0]
    assert round_speedups([100.0, 100.0], [0.0, 120.0]) == [1.2], "a batch that produced nothing is left out"
    with pytest.raises(ValueError, match="zip"):
        round_speedups([100.0], [150.0, 160.0])
