"""The speedup predicted before a sweep, on a constructed cost profile: the request-time model, the chain
fit that splits a cycle into its draft steps and the rest, predictions for depths never profiled, and the
fields a sweep row gets beside its measurement."""

from __future__ import annotations

from typing import Any

import pytest

from contract.speed_model import (
    ChainFit,
    StepCost,
    chain_depth,
    fit_chain,
    predict_from_profile,
    predicted_speedup,
)
from drafting.serving.benchmark.cost_profile import CostProfile, annotate, predictions

NEW_TOKENS = 128
BASE = StepCost(prefill_s=0.020, step_s=0.010)
VERIFY_S, DRAFT_S = 0.011, 0.0015  # a constructed host: cycle(d) = 11 ms + d x 1.5 ms


def constructed_profile() -> dict[str, Any]:
    """A host profiled at concurrency 1 and 8, chains of depth 3 and 5 and a tree, as a sweep stores it."""
    profile = CostProfile(NEW_TOKENS)
    for level, load in ((1, 1.0), (8, 1.6)):  # at 8 in flight every step costs 1.6x
        profile.baseline[level] = StepCost(BASE.prefill_s * load, BASE.step_s * load, 1.0)
        profile.configs[level] = {
            f"{d},1,{d + 1}": StepCost(0.022 * load, (VERIFY_S + d * DRAFT_S) * load, 2.5) for d in (3, 5)
        }
        profile.configs[level]["5,4,8"] = StepCost(0.022 * load, 0.030 * load, 3.1)
    return profile.as_dict()


def test_the_request_time_model() -> None:
    """(prefill + (N−1)·decode) / (prefill + N/τ·cycle): a 128-token request, τ 3, 14 ms cycles against
    10 ms decode steps."""
    cycle = StepCost(0.020, 0.014)
    expected = (0.020 + 127 * 0.010) / (0.020 + 128 / 3 * 0.014)
    assert predicted_speedup(3.0, NEW_TOKENS, BASE, cycle) == pytest.approx(expected)
    assert expected == pytest.approx(2.0896, abs=1e-4)
    assert predicted_speedup(1.0, NEW_TOKENS, BASE, StepCost(0.020, 0.010)) < 1, "no acceptance: a loss"


def test_the_chain_fit_splits_a_cycle_into_draft_steps_and_the_rest() -> None:
    fit = fit_chain({3: VERIFY_S + 3 * DRAFT_S, 5: VERIFY_S + 5 * DRAFT_S, 7: VERIFY_S + 7 * DRAFT_S})
    assert fit is not None
    assert (fit.verify_s, fit.draft_step_s) == (pytest.approx(VERIFY_S), pytest.approx(DRAFT_S))
    assert fit.cycle_s(9) == pytest.approx(VERIFY_S + 9 * DRAFT_S)
    assert fit_chain({5: 0.02}) is None, "one depth cannot be split"
    assert fit_chain({3: 0.02, 5: 0.019}) is None, "cycles that do not grow with depth split into nothing"
    assert ChainFit(0.011, 0.0015, (3, 5)).as_dict() == {
        "verify_ms": 11.0,
        "draft_step_ms": 1.5,
        "depths": [3, 5],
    }


def test_a_stored_profile_predicts_profiled_configs_and_chain_depths_it_never_profiled() -> None:
    profile = constructed_profile()
    [one, eight] = profile["by_concurrency"]
    assert one["chain_fit"] == {
        "verify_ms": pytest.approx(11.0),
        "draft_step_ms": pytest.approx(1.5),
        "depths": [3, 5],
    }
    measured = predict_from_profile(profile, "5,1,6", 1, 3.0, NEW_TOKENS)
    assert measured == pytest.approx(predicted_speedup(3.0, NEW_TOKENS, BASE, StepCost(0.022, 0.0185)))
    fitted = predict_from_profile(profile, "7,1,8", 1, 3.3, NEW_TOKENS)
    assert fitted == pytest.approx(predicted_speedup(3.3, NEW_TOKENS, BASE, StepCost(0.022, 0.0215)))
    # every cost 1.6x at concurrency 8: the same ratio (the model is in the costs' ratios)
    assert predict_from_profile(profile, "5,1,6", 8, 3.0, NEW_TOKENS) == pytest.approx(measured)
    assert predict_from_profile(profile, "5,4,8", 1, 3.1, NEW_TOKENS) is not None, "a tree profiled"
    assert predict_from_profile(profile, "6,4,10", 1, 3.1, NEW_TOKENS) is None, "a tree has no chain fit"
    assert predict_from_profile(profile, "5,1,6", 32, 3.0, NEW_TOKENS) is None, "not profiled at 32"
    assert eight["baseline"]["step_ms"] == pytest.approx(16.0)


def test_predictions_for_every_depth_train_estimated() -> None:
    """A user picks the depth before any sweep: train's acceptance by depth against the profile."""
    rows = predictions(constructed_profile(), {3: 2.4, 5: 2.9, 7: 3.1}, ["3,1,4", "5,1,6", "5,4,8"])
    at_one = {row["config"]: row for row in rows if row["concurrency"] == 1}
    assert list(at_one) == ["3,1,4", "5,1,6", "7,1,8"], "the tree has no train estimate; depth 7 is fitted"
    assert (at_one["5,1,6"]["cycle"], at_one["7,1,8"]["cycle"]) == ("measured", "chain fit")
    assert at_one["7,1,8"]["predicted_speedup"] == pytest.approx(
        predicted_speedup(3.1, NEW_TOKENS, BASE, StepCost(0.022, VERIFY_S + 7 * DRAFT_S)), abs=1e-4
    )
    best = max(at_one.values(), key=lambda row: row["predicted_speedup"])
    assert best["config"] == "5,1,6", "depth 7's extra steps cost more than its extra acceptance gives"


def test_a_sweep_row_gets_the_prediction_beside_the_measurement() -> None:
    row: dict[str, Any] = {
        "config": "5,1,6",
        "concurrency": 1,
        "by_concurrency": [
            {"concurrency": 1, "speedup": 1.9, "accept_len": 2.8},
            {"concurrency": 8, "speedup": 1.5, "accept_len": 2.8},
        ],
    }
    tree: dict[str, Any] = {
        "config": "5,4,8",
        "concurrency": 1,
        "by_concurrency": [{"concurrency": 1, "accept_len": 3.1}],
    }
    annotate([{"config": None}, row, tree], constructed_profile(), {5: 3.0})
    first = row["by_concurrency"][0]
    assert first["predicted_speedup"] == pytest.approx(
        predicted_speedup(3.0, NEW_TOKENS, BASE, StepCost(0.022, 0.0185)), abs=1e-4
    )
    assert first["modelled_speedup"] == pytest.approx(
        predicted_speedup(2.8, NEW_TOKENS, BASE, StepCost(0.022, 0.0185)), abs=1e-4
    )
    assert (row["predicted_speedup"], row["modelled_speedup"]) == (
        first["predicted_speedup"],
        first["modelled_speedup"],
    )
    assert row["predicted_from"] == "accept_lengths[5] = 3.0"
    assert tree["by_concurrency"][0]["predicted_speedup"] is None, "train estimates chains only"
    assert tree["by_concurrency"][0]["modelled_speedup"] is not None, "its served acceptance is known"


def test_a_stored_profile_of_another_shape_predicts_nothing() -> None:
    assert predict_from_profile({}, "5,1,6", 1, 3.0, NEW_TOKENS) is None
    junk = {"by_concurrency": [{"concurrency": 1, "baseline": {"step_ms": "x"}, "configs": {"5,1,6": 3}}]}
    assert predict_from_profile(junk, "5,1,6", 1, 3.0, NEW_TOKENS) is None
    assert StepCost.from_dict({"prefill_ms": -1, "step_ms": 2}) is None
    assert [chain_depth(label) for label in ("5,1,6", "5,4,8", "5,1,5", "x")] == [5, None, None, None]
