"""The sweep's release gate understands numerics: a divergence from the baseline is judged by the target at
its first divergent position, and only a real loss fails the gate.

End to end with the reference engine in real server processes on the constructed successor target with a
planted near-tie (tests.serving.planted): a rounding flip planted in the speculative server's verify makes
outputs differ at the near-tie and the gate still passes, counting it; a lossy verify (every draft kept
unchecked) fails the gate as a real loss. The cap on scorings and the strict fallback (no target to judge
with) are shown on the same target with records made by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.demo.constructed import SPECIALS, successor
from contract.params.benchmark import BenchmarkParams, SpecConfig
from contract.reasons import TerminationReason
from drafting.context import StageError
from drafting.ml.drafter import save_drafter
from drafting.serving.benchmark.benchmarking import BenchmarkRun
from drafting.serving.benchmark.load_client import RequestRecord
from drafting.serving.benchmark.sweep_gate import release_gate
from drafting.serving.benchmark.sweep_judge import SweepJudge
from drafting.serving.benchmark.sweep_report import ConfigRounds, config_row, judge_outputs
from drafting.serving.evaluation import divergence
from drafting.stages import benchmark as benchmark_stage
from tests.conftest import free_port
from tests.serving import planted
from tests.serving.conftest import RecordingContext
from tests.serving.planted import PLANTED_MARGIN, RIVAL, TIED, random_drafter

START = len(SPECIALS)
# Greedy continuations of the first two walk through TIED within 12 tokens (the successor chain); the third
# does not (start+31 … start+39, then the first words again).
PROMPTS = [[START + 1, START + 2], [START + 3], [START + 30]]
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The near-tie successor target and an untrained drafter (its drafts are mostly rejected)."""
    root = tmp_path_factory.mktemp("sweepnum")
    target = planted.near_tie_target(root / "target")
    config = json.loads((target / "config.json").read_text())
    save_drafter(random_drafter(config), root / "draft", target_config=config)
    return target, root / "draft"


def sweep_params(pair: tuple[Path, Path], tmp_path: Path, **fields: Any) -> BenchmarkParams:
    prompts = tmp_path / "ids.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in PROMPTS) + "\n")
    base: dict[str, Any] = {
        "mode": "sweep",
        "launch": {
            "engine": "reference",
            "model": str(pair[0]),
            "draft": str(pair[1]),
            "max_running_requests": 4,
            "port": free_port(),
            "ready_timeout_s": 120,
            "env": {"OMP_NUM_THREADS": "1"},
        },
        "depths": [3],
        "repeats": 2,
        "prompts": str(prompts),
        "max_new_tokens": NEW_TOKENS,
        "warmup_requests": 0,
        "speedup_threshold": 0.0,  # the reference engine on a CPU: outputs are what is judged here
        "smoke": False,
    }
    return BenchmarkParams.model_validate({**base, **fields})


def test_a_flip_at_a_planted_near_tie_differs_from_the_baseline_and_passes_the_gate_as_a_near_tie(
    ctx: RecordingContext, pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted.in_servers(monkeypatch, "flip")  # the speculative path's verify flips where the top two tie
    # the smoke check runs too (a random draft: judged for its outputs only) and agrees with the gate
    params = sweep_params(pair, tmp_path, smoke=True, smoke_min_accept_length=1.0)
    result = benchmark_stage.run(ctx, params)
    row = result["rows"][1]
    assert row["config"] == "3,1,4"
    # 3 prompts × 2 rounds: the two prompts that walk through TIED flip there in both rounds
    assert row["divergences"] == {"identical": 2, "near_tie": 4, "real_loss": 0, "unscored": 0}
    assert (row["outputs_match"], row["outputs_identical"], row["mismatched_requests"]) == (True, False, 4)
    assert row["divergence_judge"]["mode"] == "target"
    assert row["divergence_judge"]["scored_in"] == "float32 on cpu"
    details = row["divergence_details"]
    assert [(d["request"], d["rounds"]) for d in details] == [(0, [1, 2]), (1, [1, 2])]
    for tie in details:
        assert tie["verdict"] == "near_tie"
        assert (tie["baseline_token"], tie["candidate_token"]) == (successor(TIED), RIVAL)
        assert tie["margin"] == pytest.approx(PLANTED_MARGIN, abs=1e-3)
        assert tie["margin"] < tie["bound"]
    assert [d["position"] for d in details] == [3, 2]  # where TIED's successor is due
    numerics = result["numerics"]
    assert (numerics["scored"], numerics["reused"]) == (2, 2), "each distinct divergence scored once"
    assert numerics["strict_reason"] is None
    gate = result["gate"]
    assert gate["deployable"] is True, gate
    assert gate["near_ties_accepted"] == 4
    assert "4 numerical near-tie(s) accepted" in gate["verdict"]
    assert [e["verdict"] for e in ctx.recording.of_type("smoke")] == ["passed"]
    [event] = ctx.recording.of_type("benchmark_row")
    assert event["divergences"]["near_tie"] == 4
    assert any("near_tie 4" in line for line in ctx.lines)


def test_a_lossy_verify_fails_the_gate_as_a_real_loss(
    ctx: RecordingContext, pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted.in_servers(monkeypatch, "lossy")  # every random draft kept: tokens the target would not choose
    with pytest.raises(StageError) as caught:
        benchmark_stage.run(ctx, sweep_params(pair, tmp_path))
    failure = caught.value
    assert failure.reason is TerminationReason.RELEASE_GATE_FAILED
    row = failure.details["rows"][1]
    assert row["outputs_match"] is False
    assert row["divergences"]["real_loss"] >= 2
    assert row["divergences"]["near_tie"] == 0
    assert row["accept_len"] > 3.0, "a lossy verify looks like a perfect draft"
    loss = row["divergence_details"][0]
    assert loss["verdict"] == "real_loss"
    assert loss["margin"] is None or loss["margin"] > loss["bound"] or "top two" in loss["note"]
    gate = failure.details["gate"]
    assert gate["deployable"] is False
    assert gate["reasons"][0].startswith(f"3,1,4: {row['divergences']['real_loss']} real loss(es)")
    assert "real loss" in failure.message


def test_a_config_its_smoke_test_refuses_is_recorded_and_the_sweep_goes_on(
    ctx: RecordingContext, pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the H200 a tree config's smoke failure after three measured chain configs failed the job and lost
    every measurement. Now: the lossy config (planted in depth-3 servers only) is refused with its smoke
    report, the next config is still measured, and the gate names the refused one."""
    planted.in_servers(monkeypatch, "lossy@3")
    configs = [{"steps": 3, "topk": 1, "draft_tokens": 4}, {"steps": 1, "topk": 1, "draft_tokens": 2}]
    params = sweep_params(
        pair, tmp_path, depths=None, configs=configs, smoke=True, smoke_min_accept_length=1.0
    )
    with pytest.raises(StageError) as caught:
        benchmark_stage.run(ctx, params)
    failure = caught.value
    assert failure.reason is TerminationReason.RELEASE_GATE_FAILED
    rows = failure.details["rows"]
    assert [row["config"] for row in rows] == [None, "3,1,4", "1,1,2"]
    refused, measured = rows[1], rows[2]
    assert refused["rejected"]["verdict"] == "outputs_diverged"
    assert refused["rejected"]["real_losses"] >= 1
    assert refused["speedup"] is None
    assert measured.get("rejected") is None
    assert measured["outputs_match"] is True
    assert measured["speedup_n"] == len(PROMPTS), "the interval resamples requests"
    assert measured["speedup_pairs"] == 2 * len(PROMPTS), "each request of both rounds paired"
    assert failure.details["best_config"] == "1,1,2"
    gate = failure.details["gate"]
    assert gate["deployable"] is False
    assert gate["reasons"][0].startswith("3,1,4: refused by its smoke test, not measured (outputs_diverged")
    smokes = [(e["config"], e["verdict"]) for e in ctx.recording.of_type("smoke")]
    assert smokes == [("3,1,4", "outputs_diverged"), ("1,1,2", "passed")]
    assert [r["config"] for r in ctx.recording.of_type("benchmark_row")] == ["3,1,4", "1,1,2"]


def record(index: int, output: list[int], prompt: list[int]) -> RequestRecord:
    return RequestRecord(index, prompt_tokens=len(prompt), completion_tokens=len(output), output_ids=output)


def flipped_rounds(count: int) -> ConfigRounds:
    """`count` rounds of the first two prompts, the speculative side flipped at the planted near-tie."""
    base = [[START + 3, START + 4, TIED, successor(TIED)], [START + 4, TIED, successor(TIED)]]
    flip = [[START + 3, START + 4, TIED, RIVAL], [START + 4, TIED, RIVAL]]

    def run(outputs: list[list[int]]) -> BenchmarkRun:
        records = [record(i, out, PROMPTS[i]) for i, out in enumerate(outputs)]
        return BenchmarkRun({"output_tok_s": 100.0}, records)

    rounds = ConfigRounds(SpecConfig.chain(3))
    for _ in range(count):
        rounds.baseline.append(run(base))
        rounds.speculative.append(run(flip))
        rounds.orders.append(["baseline", "speculative"])
    return rounds


def baseline_row() -> dict[str, Any]:
    return {"config": None, "label": "baseline", "failed_requests": 0}


def test_past_the_scoring_cap_divergences_are_reported_unscored_and_not_judged(
    pair: tuple[Path, Path],
) -> None:
    judge = SweepJudge(pair[0], lambda request: PROMPTS[request], max_scored=1, budget_s=0.0)
    rounds = flipped_rounds(2)
    judge_outputs(rounds, judge)
    row = config_row(rounds)
    assert row["divergences"] == {"identical": 0, "near_tie": 2, "real_loss": 0, "unscored": 2}
    assert row["outputs_match"] is True
    unscored = [d for d in row["divergence_details"] if d["verdict"] == "unscored"]
    assert [(d["request"], d["rounds"]) for d in unscored] == [(1, [1, 2])]
    assert "scoring cap (1 distinct divergences in 0 s; 1 are always judged" in unscored[0]["note"]
    gate = release_gate([baseline_row(), row], None, 0.0)
    assert gate["deployable"] is True
    assert gate["unscored_not_judged"] == 2
    assert "2 divergence(s) not judged" in gate["verdict"]
    assert "2 numerical near-tie(s) accepted" in gate["verdict"]
    assert judge.summary()["scored"] == 1


def test_within_the_scoring_budget_a_config_judges_past_its_count(pair: tuple[Path, Path]) -> None:
    """GPU run 8: a 72-prompt sweep of a 135M target left 81 of 113 divergences unjudged under a count of 16
    alone; scorings that fit the time budget go on past the count."""
    judge = SweepJudge(pair[0], lambda request: PROMPTS[request], max_scored=1, budget_s=600.0)
    rounds = flipped_rounds(2)
    judge_outputs(rounds, judge)
    row = config_row(rounds)
    assert row["divergences"] == {"identical": 0, "near_tie": 4, "real_loss": 0, "unscored": 0}
    assert row["divergence_judge"]["scored"] == 2
    assert 0 <= row["divergence_judge"]["scoring_s"] < 600  # a tiny target scores in milliseconds
    assert judge.summary()["scoring_budget_s_per_config"] == 600.0


def test_without_a_target_to_judge_with_outputs_are_compared_bit_for_bit_and_the_result_says_why(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(divergence, "fits_in_float32", lambda folder, device: False)
    judge = SweepJudge(pair[0], lambda request: PROMPTS[request])
    rounds = flipped_rounds(1)
    judge_outputs(rounds, judge)
    row = config_row(rounds)
    assert row["divergences"]["unscored"] == 2
    assert (row["outputs_match"], row["outputs_identical"]) == (False, False)
    assert row["divergence_judge"]["mode"] == "strict"
    assert "does not fit in half of this host's free memory" in row["divergence_judge"]["strict_reason"]
    gate = release_gate([baseline_row(), row], None, 0.0)
    assert gate["deployable"] is False
    assert gate["reasons"][0].startswith("3,1,4: greedy outputs differ from the baseline's in 2 request(s)")
    assert "compared bit for bit" in gate["reasons"][0]
    assert gate["strict_configs"] == ["3,1,4"]
    assert judge.summary()["strict_reason"] == row["divergence_judge"]["strict_reason"]


def test_identical_outputs_need_no_scorer_and_say_so() -> None:
    judge = SweepJudge("/nonexistent/target", lambda request: PROMPTS[request])
    rounds = flipped_rounds(1)
    rounds.speculative = rounds.baseline
    judge_outputs(rounds, judge)
    row = config_row(rounds)
    assert row["divergences"]["identical"] == 2
    assert (row["outputs_match"], row["outputs_identical"]) == (True, True)
    assert judge.summary()["scorer"] == "not loaded: no divergence needed it"
    gate = release_gate([baseline_row(), row], None, 0.0)
    assert gate["verdict"].endswith("; outputs: every greedy output identical to the baseline's")
