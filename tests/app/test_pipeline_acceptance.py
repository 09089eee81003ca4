"""The pipeline's acceptance table: training's estimate, eval's figure and the served one by depth, with
errors against the served figure. Inputs are step results shaped as the stages write them (the numbers are
a SmolLM2-135M pipeline's on an H200, where it has them)."""

from __future__ import annotations

from typing import Any

import pytest

from app.pipelines.acceptance import EVAL_TOLERANCE, acceptance_report


def train_result(best_epoch: int, *, keep_best: bool = True) -> dict[str, Any]:
    epochs = [
        {
            "epoch": 1.0,
            "val/est_accept_len_d3": 1.586,
            "val/est_accept_len_d5": 1.622,
            "val/est_accept_len": 1.6,
        },
        {"epoch": 2.0, "val/est_accept_len_d3": 1.964, "val/est_accept_len_d5": 2.111},
        {"epoch": 3.0, "val/est_accept_len_d3": 1.9, "val/est_accept_len_d5": 2.0},
    ]
    best = {"epoch": best_epoch, "checkpoint": f"/runs/train/epoch_{best_epoch}"}
    selected = best["checkpoint"] if keep_best else "/runs/train/epoch_3"
    return {"epochs": epochs, "best": best, "selected": selected}


EVAL = {
    "depths": [
        {"depth": 3, "accept_length": 1.4357, "accept_length_meta": 1.4423},
        {"depth": 5, "accept_length": 1.4534, "accept_length_meta": 1.4601},
    ]
}


def chain_row(steps: int, accept: float | None, **extra: Any) -> dict[str, Any]:
    return {"config": f"{steps},1,{steps + 1}", "steps": steps, "topk": 1, "draft_tokens": steps + 1,
            "accept_len": accept, **extra}  # fmt: skip


def test_each_depth_puts_the_three_figures_side_by_side_with_errors_against_the_served_one() -> None:
    rows = [{"config": None, "steps": None, "accept_len": None}, chain_row(3, 1.50), chain_row(5, 1.46)]
    tree = {"config": "5,4,8", "steps": 5, "topk": 4, "draft_tokens": 8, "accept_len": 1.75}
    report = acceptance_report(
        {"train": train_result(2), "eval": EVAL, "benchmark": {"engine": "sglang", "rows": [*rows, tree]}}
    )
    assert report is not None
    assert report["engine"] == "sglang"
    by_depth = {row["depth"]: row for row in report["by_depth"]}
    assert sorted(by_depth) == [3, 5]
    assert by_depth[5]["served"] == 1.46, "a tree of 5 steps is not the depth-5 chain"
    assert by_depth[3] == {
        "depth": 3,
        "train_estimate": 1.964,  # the selected (best) epoch's, not the last
        "eval": 1.4423,
        "served": 1.5,
        "train_error": pytest.approx((1.964 - 1.5) / 1.5, abs=1e-4),
        "eval_error": pytest.approx((1.4423 - 1.5) / 1.5, abs=1e-4),
        "served_held_out": None,  # no serve_held_out step
        "train_error_held_out": None,
        "speedup": None,  # rows from before the paired speedup have none measured here
        "predicted_speedup": None,  # and no cost profile to predict one from
        "speedup_error": None,
        "speedup_concurrency": None,
    }
    assert abs(by_depth[3]["eval_error"]) <= EVAL_TOLERANCE
    assert abs(by_depth[5]["eval_error"]) <= EVAL_TOLERANCE
    assert report["eval_within_tolerance"] is True


def test_the_last_epoch_is_read_when_the_pipeline_kept_the_last_checkpoint() -> None:
    report = acceptance_report({"train": train_result(2, keep_best=False), "eval": EVAL})
    assert report is not None
    assert {row["depth"]: row["train_estimate"] for row in report["by_depth"]} == {3: 1.9, 5: 2.0}
    assert all(row["served"] is None and row["eval_error"] is None for row in report["by_depth"])
    assert report["eval_within_tolerance"] is None


def test_a_failed_sweep_still_gives_what_it_measured_and_never_a_refused_config() -> None:
    measured = [chain_row(3, 1.5), chain_row(5, None, rejected={"verdict": "outputs_diverged"})]
    report = acceptance_report({"eval": EVAL, "benchmark": {"rows_measured": measured}})
    assert report is not None
    by_depth = {row["depth"]: row for row in report["by_depth"]}
    assert by_depth[3]["served"] == 1.5
    assert by_depth[5]["served"] is None
    assert by_depth[5]["eval"] == 1.4601


def test_without_eval_or_sweep_figures_there_is_no_table() -> None:
    assert acceptance_report({"train": train_result(2)}) is None
    assert acceptance_report({"train": None, "eval": {"depths": "oops"}, "benchmark": {"rows": [{}]}}) is None
    assert (
        acceptance_report({"train": [1], "eval": "text", "benchmark": {"rows": [None, {"steps": "3"}]}})
        is None
    )


def test_the_held_out_extraction_s_estimate_is_preferred_and_named() -> None:
    result = train_result(2)
    result["epochs"][1] |= {"held_out/est_accept_len_d3": 1.52, "held_out/est_accept_len_d5": 1.49}
    report = acceptance_report({"train": result, "eval": EVAL})
    assert report is not None
    assert {row["depth"]: row["train_estimate"] for row in report["by_depth"]} == {3: 1.52, 5: 1.49}
    assert report["sources"]["train"].startswith("held_out/est_accept_len_d{N} of the selected checkpoint")
    split = acceptance_report({"train": train_result(2), "eval": EVAL})
    assert split is not None
    assert split["sources"]["train"].startswith("val/est_accept_len_d{N} of the selected checkpoint")
    # held-out figures of another epoch than the selected one are not taken
    other = train_result(2)
    other["epochs"][2] |= {"held_out/est_accept_len_d3": 1.3}
    report = acceptance_report({"train": other, "eval": EVAL})
    assert report is not None
    assert report["by_depth"][0]["train_estimate"] == 1.964
    assert report["sources"]["train"].startswith("val/")


def test_the_simulated_acceptance_is_preferred_to_the_per_position_estimate() -> None:
    """A run recording both: the train column is the simulated decode (run 5, held-out: per position 2.053,
    simulated to be compared with SGLang's 1.718), with the error against the served figure."""
    result = train_result(2)
    result["epochs"][1] |= {
        "held_out/est_accept_len_d5": 2.053, "held_out/sim_accept_len_d5": 1.74,
        "val/sim_accept_len_d5": 2.2,
    }  # fmt: skip
    report = acceptance_report({"train": result, "benchmark": {"rows": [chain_row(5, 1.718)]}})
    assert report is not None
    assert report["by_depth"] == [
        {"depth": 5, "train_estimate": 1.74, "eval": None, "served": 1.718,
         "train_error": round((1.74 - 1.718) / 1.718, 4), "eval_error": None,
         "served_held_out": None, "train_error_held_out": None, "speedup": None, "predicted_speedup": None,
         "speedup_error": None, "speedup_concurrency": None},
    ]  # fmt: skip
    assert report["sources"]["train"].startswith("held_out/sim_accept_len_d{N} of the selected checkpoint")
    del result["epochs"][1]["held_out/sim_accept_len_d5"]  # an older held-out record still beats the split
    split = acceptance_report({"train": result, "benchmark": {"rows": [chain_row(5, 1.718)]}})
    assert split is not None
    assert split["sources"]["train"].startswith("held_out/est_accept_len_d{N}")  # held-out first, then kind


def test_eval_on_other_requests_than_the_sweep_is_shown_but_not_compared() -> None:
    """eval's figure predicts the served one only on the same requests: with another prompt set or budget the
    report leaves its error out and says what differed (run 4: the built-in set against MT-Bench)."""
    swept = {"engine": "sglang", "rows": [chain_row(3, 1.50), chain_row(5, 1.46)]}
    results = {"eval": EVAL, "benchmark": swept}
    same = {"eval": {"prompts": "mtbench", "max_new_tokens": 192},
            "benchmark": {"prompts": "mtbench", "max_new_tokens": 192, "mode": "sweep"}}  # fmt: skip
    compared = acceptance_report(results, same)
    assert compared is not None
    assert compared["eval_not_compared"] is None
    assert compared["by_depth"][0]["eval_error"] == pytest.approx((1.4423 - 1.5) / 1.5, abs=1e-4)
    other = {"eval": {"prompts": None, "max_new_tokens": 128}, "benchmark": same["benchmark"]}
    report = acceptance_report(results, other)
    assert report is not None
    assert [row["eval"] for row in report["by_depth"]] == [1.4423, 1.4601]  # still shown
    assert [row["eval_error"] for row in report["by_depth"]] == [None, None]
    assert report["eval_within_tolerance"] is None
    assert report["eval_not_compared"].startswith(
        "eval decoded other requests than the sweep (prompts None vs 'mtbench'; max_new_tokens 128 vs 192)"
    )
    junk = acceptance_report(results, {"eval": ["not", "a", "mapping"], "benchmark": 3})
    assert junk is not None
    assert junk["eval_not_compared"] is None  # unknown params: compared as before, never an error


def test_the_report_says_which_prompts_the_train_column_replayed() -> None:
    """The train figure replays held-out (or validation) answers, never the sweep's requests: a train_error
    across two prompt sets is named as one (run 5: 72 held-out questions against the sweep's 8)."""
    result = train_result(2)
    result["epochs"][1] |= {"held_out/sim_accept_len_d5": 2.126}
    results = {"train": result, "benchmark": {"rows": [chain_row(5, 1.718)]}}
    params = {
        "generate_held_out": {"prompts": "/w/mtbench_held_out.jsonl"},
        "benchmark": {"prompts": "/w/mtbench_eval.jsonl", "mode": "sweep"},
    }
    report = acceptance_report(results, params)
    assert report is not None
    assert report["train_compared_on"] == (
        "held-out prompts '/w/mtbench_held_out.jsonl', the sweep's '/w/mtbench_eval.jsonl': train_error "
        "compares two sets"
    )
    assert report["by_depth"][0]["train_error"] == round((2.126 - 1.718) / 1.718, 4)  # still given
    params["benchmark"]["prompts"] = "/w/mtbench_held_out.jsonl"
    same = acceptance_report(results, params)
    assert same is not None
    assert same["train_compared_on"].startswith("the sweep's prompts ('/w/mtbench_held_out.jsonl')")
    split = acceptance_report(
        {"train": train_result(2), "benchmark": {"rows": [chain_row(5, 1.718)]}}, params
    )
    assert split is not None
    assert split["train_compared_on"].startswith("the training data's validation split")
    unknown = acceptance_report(results, {"generate_held_out": "junk", "benchmark": 3})
    assert unknown is not None
    assert unknown["train_compared_on"] is None  # params that do not say: no claim, never an error
    untrained = acceptance_report({"benchmark": {"rows": [chain_row(5, 1.718)]}}, params)
    assert untrained is not None
    assert untrained["train_compared_on"] is None  # no train figure, nothing compared


def test_served_on_the_held_out_prompts_train_is_compared_like_with_like() -> None:
    """GPU run 8: the simulation said 2.968 at d5 on the 72 held-out questions, SGLang served 2.937 on those
    very prompts (serve_held_out) and 2.720 on the sweep's 8 others."""
    result = train_result(2)
    result["epochs"][1] |= {"held_out/sim_accept_len_d5": 2.968}
    held_out = {"engine": "sglang", "rows": [{"config": None, "steps": None}, chain_row(5, 2.937)]}
    swept = {"engine": "sglang", "rows": [chain_row(5, 2.720)]}
    report = acceptance_report({"train": result, "serve_held_out": held_out, "benchmark": swept})
    assert report is not None
    (row,) = report["by_depth"]
    assert (row["served"], row["served_held_out"]) == (2.72, 2.937)
    assert row["train_error"] == round((2.968 - 2.72) / 2.72, 4)
    assert row["train_error_held_out"] == round((2.968 - 2.937) / 2.937, 4)
    assert report["sources"]["served_held_out"].startswith("accept_len of serve_held_out's chain config")
    # alone (the sweep refused, or not yet run), it still makes the table
    alone = acceptance_report({"train": result, "serve_held_out": held_out})
    assert alone is not None
    assert alone["engine"] == "sglang"
    assert alone["by_depth"][0]["served"] is None
    # a train figure from the training data's split was not computed on those prompts: no like-for-like error
    split = acceptance_report({"train": train_result(2), "serve_held_out": held_out})
    assert split is not None
    assert split["by_depth"][0]["served_held_out"] == 2.937
    assert split["by_depth"][0]["train_error_held_out"] is None


def test_the_speedup_train_predicts_through_the_sweep_s_cost_profile_stands_beside_the_measured_one() -> None:
    """A sweep with a cost profile (measured on its servers at concurrency 1): train's acceptance for depth
    5 predicts the speedup through it, beside the paired speedup the sweep measured at its gate's
    concurrency; a stored profile of another shape predicts nothing and breaks nothing."""
    from contract.speed_model import StepCost, predicted_speedup

    result = train_result(2)
    result["epochs"][1] |= {"held_out/sim_accept_len_d5": 2.9}
    profile = {
        "new_tokens": 192,
        "by_concurrency": [
            {
                "concurrency": 1,
                "baseline": {"prefill_ms": 12.0, "step_ms": 6.0},
                "configs": {"5,1,6": {"prefill_ms": 14.0, "step_ms": 9.0, "tokens_per_step": 3.0}},
            }
        ],
    }
    sweep = {"rows": [chain_row(5, 3.0, speedup=1.8)], "cost_profile": profile, "gate_concurrency": 1}
    report = acceptance_report({"train": result, "benchmark": sweep})
    assert report is not None
    [row] = report["by_depth"]
    expected = predicted_speedup(2.9, 192, StepCost(0.012, 0.006), StepCost(0.014, 0.009))
    assert row["predicted_speedup"] == pytest.approx(expected, abs=1e-4)
    assert (row["speedup"], row["speedup_concurrency"]) == (1.8, 1)
    assert row["speedup_error"] == round((row["predicted_speedup"] - 1.8) / 1.8, 4)
    broken = acceptance_report(
        {"train": result, "benchmark": {**sweep, "cost_profile": {"by_concurrency": 3}}}
    )
    assert broken is not None
    assert broken["by_depth"][0]["predicted_speedup"] is None
