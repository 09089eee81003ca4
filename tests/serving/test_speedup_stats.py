"""The sweep's statistics against published values: Student's t quantiles, intervals, per-round ratios."""

from __future__ import annotations

import math

import pytest

from drafting.serving.speedup_stats import (
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


def test_interval_of_five_rounds() -> None:
    # mean 1.15, s = √(0.05 / 4) = 0.111803, half width = 2.776445 · s / √5 = 0.138822
    interval = speedup_interval([1.1, 1.2, 1.3, 1.0, 1.15])
    assert interval.n == 5
    assert interval.mean == pytest.approx(1.15)
    assert interval.std == pytest.approx(0.111803, abs=1e-6)
    assert interval.low == pytest.approx(1.011178, abs=1e-6)
    assert interval.high == pytest.approx(1.288822, abs=1e-6)
    assert interval.as_dict() == {
        "mean": 1.15,
        "std": 0.1118,
        "n": 5,
        "ci_low": 1.0112,
        "ci_high": 1.2888,
        "confidence": 0.95,
    }
    assert interval.describe() == "1.150× (95 % CI 1.011–1.289, n 5)"


def test_two_rounds_give_a_wide_interval_and_one_gives_none() -> None:
    interval = speedup_interval([1.2, 1.4])  # s = 0.141421, t(0.975, 1) = 12.7062
    assert interval.low == pytest.approx(1.3 - 12.7062 * 0.141421 / math.sqrt(2), abs=1e-3)
    assert interval.low < 0.1 < 1.3 < interval.high
    with pytest.raises(ValueError, match="at least 2 rounds"):
        speedup_interval([1.2])


def test_identical_rounds_have_a_zero_width_interval() -> None:
    interval = speedup_interval([1.25, 1.25, 1.25])
    assert (interval.low, interval.mean, interval.high, interval.std) == (1.25, 1.25, 1.25, 0.0)


def test_round_speedups_pair_by_round_and_skip_rounds_that_measured_nothing() -> None:
    assert round_speedups([100.0, 200.0, None, 0.0, 50.0], [150.0, 200.0, 90.0, 80.0, None]) == [1.5, 1.0]
    with pytest.raises(ValueError, match="zip"):
        round_speedups([100.0], [150.0, 160.0])
