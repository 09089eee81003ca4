"""The depth sweep end to end with the reference engine, and the release gate's rules."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.benchmarks.paired import compare
from contract.params.benchmark import BenchmarkParams, SpecConfig
from contract.reasons import TerminationReason
from drafting.context import StageError
from drafting.serving.benchmark import load_client
from drafting.serving.benchmark.sweep import format_table, release_gate, run_sweep
from drafting.stages import benchmark as benchmark_stage
from drafting.stages.prompt_sets import stage_prompts
from tests.conftest import free_port
from tests.serving.conftest import RecordingContext
from testsupport.tiny_pair import TinyPair


def test_sweep_keeps_the_baseline_up_and_pairs_each_request_at_each_concurrency(
    ctx: RecordingContext, tiny_pair: TinyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request log (every block the load client sends, to which server, how many requests) shows the
    pairing: at concurrency 1 each request goes to both servers back to back, the side that goes first
    alternating request by request and round by round; at concurrency 4 the four prompts go as one block
    of four in flight; the baseline server alive throughout."""
    sent: list[tuple[str, int]] = []
    real_run_load = load_client.run_load

    def logged_run_load(url: str, prompts: Any, options: Any) -> Any:
        sent.append((url.rstrip("/"), len(prompts)))
        assert options.concurrency >= len(prompts), "a block is all in flight at once"
        return real_run_load(url, prompts, options)

    monkeypatch.setattr(load_client, "run_load", logged_run_load)
    prompts = tmp_path / "ids.jsonl"
    categories = ["even" if i % 2 == 0 else "odd" for i in range(len(tiny_pair.prompts))]
    records = zip(tiny_pair.prompts, categories, strict=True)
    prompts.write_text("\n".join(json.dumps({"input_ids": p, "category": c}) for p, c in records))
    params = BenchmarkParams(
        mode="sweep",
        launch=_reference_launch(tiny_pair),
        configs=[{"steps": 3, "topk": 1, "draft_tokens": 4}, {"steps": 1, "topk": 1, "draft_tokens": 2}],
        repeats=2,
        concurrencies=[1, 4],
        prompts=str(prompts),
        max_new_tokens=16,
        warmup_requests=0,
        timing="stream",
        speedup_threshold=1e9,  # unreachable: the stage must fail after emitting the table
        max_speedup_half_width=10,  # a verdict whatever the CPU's noise: the gate must call it
        accept_lengths={3: 2.0},  # what train would have estimated for the chain of depth 3
        smoke_min_accept_length=1.0,  # a 30-step fit on a random target: the smoke judges its outputs only
    )
    with pytest.raises(StageError) as caught:
        benchmark_stage.run(ctx, params)
    failure = caught.value
    assert failure.reason is TerminationReason.RELEASE_GATE_FAILED
    result = failure.details
    assert result["interleaved"] is True
    assert (result["repeats"], result["concurrencies"], result["gate_concurrency"]) == (2, [1, 4], 1)
    assert result["cuda_graphs"]["enabled"] is None  # the reference engine has none, and says so
    servers = ctx.recording.of_type("server")
    ready = [e for e in servers if e["state"] == "ready"]
    assert [e["config"] for e in ready] == [None, "3,1,4", "1,1,2"]
    baseline_url, first_url, second_url = (e["url"] for e in ready)
    assert baseline_url != first_url, "two servers up at once need two ports"
    assert first_url == second_url, "one config's server at a time, on the speculative port"
    # the baseline stopped last: it served every round of both configs
    assert [(e["config"], e["state"]) for e in servers if e["state"] == "stopped"] == [
        ("3,1,4", "stopped"),
        ("1,1,2", "stopped"),
        (None, "stopped"),
    ]
    side = {baseline_url: "B", first_url: "S", second_url: "S"}
    per_config = "BSSBBSSB" + "SBBSSBBS"  # concurrency 1: four requests, two rounds, first side alternating
    per_config += "BS" + "SB"  # concurrency 4: one block of four per round
    # each server's cost profile as it starts (one wave per concurrency: 1 request, then 4), then the rounds
    measured = [(url, count) for url, count in sent]
    profile_waves = [(baseline_url, 1), (baseline_url, 4)]
    assert measured[:2] == profile_waves, "the baseline is profiled once, when it starts"
    config_sends = measured[2:]
    waves = [(first_url, 1), (first_url, 4)]
    assert config_sends[:2] == waves
    assert config_sends[22:24] == waves
    rounds_sent = config_sends[2:22] + config_sends[24:]
    assert "".join(side[url] for url, _ in rounds_sent) == per_config * 2
    assert [count for _, count in rounds_sent] == ([1] * 16 + [4] * 4) * 2
    rounds = ctx.recording.of_type("benchmark_round")
    assert [(r["config"], r["concurrency"], r["round"], r["order"][0]) for r in rounds] == [
        ("3,1,4", 1, 1, "baseline"),
        ("3,1,4", 1, 2, "speculative"),
        ("3,1,4", 4, 1, "baseline"),
        ("3,1,4", 4, 2, "speculative"),
        ("1,1,2", 1, 1, "baseline"),
        ("1,1,2", 1, 2, "speculative"),
        ("1,1,2", 4, 1, "baseline"),
        ("1,1,2", 4, 2, "speculative"),
    ]
    for entry in rounds:  # the blocks of a round ran one after the other, never overlapping
        blocks = entry["batches"]
        assert len(blocks) == 2 * len(tiny_pair.prompts) // entry["concurrency"]
        for earlier, later in itertools.pairwise(blocks):
            assert earlier["ended_at"] <= later["started_at"]
        assert entry["speedup"] == pytest.approx(
            entry["speculative_tok_s"] / entry["baseline_tok_s"], rel=1e-3
        )
    profile = result["cost_profile"]
    assert [level["concurrency"] for level in profile["by_concurrency"]] == [1, 4]
    for level in profile["by_concurrency"]:
        assert level["baseline"]["step_ms"] > 0
        assert set(level["configs"]) == {"3,1,4", "1,1,2"}
        assert all(cost["tokens_per_step"] >= 1.0 for cost in level["configs"].values())
        assert level["chain_fit"] is None or level["chain_fit"]["depths"] == [1, 3]
    rows = result["rows"]
    assert [row["config"] for row in rows] == [None, "3,1,4", "1,1,2"]
    for row in rows[1:]:  # the prediction beside the measurement, at every concurrency
        assert all(level["modelled_speedup"] > 0 for level in row["by_concurrency"])
    assert all(level["predicted_speedup"] > 0 for level in rows[1]["by_concurrency"])
    assert rows[1]["predicted_from"] == "accept_lengths[3] = 2.0"
    assert rows[2]["predicted_speedup"] is None, "no acceptance given for depth 1: nothing to predict from"
    assert rows[0]["batches"] == 4, "the baseline's rounds at the gate's concurrency, both configs"
    assert rows[0]["concurrency"] == 1
    assert rows[0]["speedup"] == 1.0
    assert rows[0]["accept_len"] is None
    for row in rows[1:]:
        assert row["outputs_match"] is True
        assert row["mismatched_requests"] == 0
        assert row["accept_len"] > 1.0, "fitted drafter: plumbing check, not quality"
        assert row["speedup_n"] == len(tiny_pair.prompts), "the interval resamples requests"
        assert row["speedup_pairs"] == 2 * len(tiny_pair.prompts)
        assert row["speedup_ci_low"] < row["speedup"] < row["speedup_ci_high"]
        assert row["speedup_half_width"] == pytest.approx(
            (row["speedup_ci_high"] - row["speedup_ci_low"]) / 2, abs=1e-4
        )
        levels = row["by_concurrency"]
        assert [level["concurrency"] for level in levels] == [1, 4]
        assert levels[0]["speedup"] == row["speedup"], "the row is the gate's concurrency"
        assert all(level["speedup_n"] == len(tiny_pair.prompts) for level in levels)
        assert all(level["pays"] in ("yes", "no", "unclear") for level in levels)
        first_not_paying = next((lv["concurrency"] for lv in levels if lv["pays"] != "yes"), None)
        assert row["stops_paying_at"] == first_not_paying
        assert row["timing"] == "stream"
        assert row["ttft_p50_ms"] is not None
        # acceptance per prompt category, over the 3 rounds: prompts counted once, tokens and steps summed
        per_category = row["by_category"]
        assert list(per_category) == ["even", "odd"]
        for name, stats in per_category.items():
            assert stats["prompts"] == categories.count(name)
            assert stats["completion_tokens"] == categories.count(name) * 16 * 2  # ignore_eos, 2 rounds
            assert stats["accept_length_meta"] == pytest.approx(
                stats["completion_tokens"] / stats["verify_steps"], abs=1e-4
            )
        steps = sum(stats["verify_steps"] for stats in per_category.values())
        tokens = sum(stats["completion_tokens"] for stats in per_category.values())
        assert row["accept_len"] == pytest.approx(tokens / steps, abs=1e-3), (
            "the categories add up to the row"
        )
    assert "by_category" not in rows[0], "the baseline has no acceptance"
    # each prompt's counts over the rounds, in prompt order: what a paired comparison of two drafts reads
    for row in rows[1:]:
        assert [p["completion_tokens"] for p in row["per_prompt"]] == [16 * 2] * len(tiny_pair.prompts)
        by_prompt = [(p["completion_tokens"], p["spec_verify_ct"]) for p in row["per_prompt"]]
        odd = [counts for index, counts in enumerate(by_prompt) if index % 2]
        assert sum(steps for _, steps in odd) == row["by_category"]["odd"]["verify_steps"]
    assert "per_prompt" not in rows[0]
    # a failed gate's result still says what it asked, so it can be compared with another draft's
    assert result["prompt_set"]["prompts"] == len(tiny_pair.prompts)
    assert len(result["prompt_set"]["requests_digest"]) == 64
    with_itself = compare(result, result)
    assert [c["config"] for c in with_itself["configs"]] == ["3,1,4", "1,1,2"]
    for row, paired in zip(rows[1:], with_itself["configs"], strict=True):
        assert paired["a_accept_len"] == pytest.approx(row["accept_len"], abs=1e-3), "pooled as the row is"
        assert (paired["difference"], paired["ci_low"], paired["ci_high"]) == (0, 0, 0)
        assert paired["tied_prompts"] == len(tiny_pair.prompts)
    assert result["best_config"] in ("3,1,4", "1,1,2")
    gate = result["gate"]
    assert gate["deployable"] is False
    assert gate["judged_on"] == "speedup_ci_low"
    assert gate["chosen_config"] == result["best_config"]
    assert "lower bound" in failure.message
    assert "not above the threshold" in failure.message
    assert any(line.startswith("config sweep:") for line in ctx.lines)
    assert not any(psutil.pid_exists(e["pid"]) for e in servers)


def test_without_interleaving_each_server_runs_alone_and_the_result_says_so(
    ctx: RecordingContext, tiny_pair: TinyPair, tmp_path: Path
) -> None:
    prompts = tmp_path / "ids.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in tiny_pair.prompts[:2]))
    params = BenchmarkParams(
        mode="sweep",
        launch=_reference_launch(tiny_pair),
        depths=[2],
        repeats=2,
        interleave=False,
        smoke=False,
        prompts=str(prompts),
        max_new_tokens=8,
        warmup_requests=0,
        speedup_threshold=0.0,
    )
    result = run_sweep(ctx, params, stage_prompts(ctx, params.prompts, params.max_prompts)[0])
    assert result["interleaved"] is False
    assert result["interleave_reason"] == "interleave is false in the params"
    servers = ctx.recording.of_type("server")
    assert [(e["config"], e["state"]) for e in servers if e["state"] in ("ready", "stopped")] == [
        (None, "ready"),
        (None, "stopped"),
        ("2,1,3", "ready"),
        ("2,1,3", "stopped"),
    ]
    [row] = result["rows"][1:]
    assert row["config"] == "2,1,3"
    assert row["speedup_n"] == 2, "two requests, each paired with the baseline's run of it"
    assert len(row["rounds"]) == 2
    assert all(r["order"] == ["baseline", "speculative"] for r in row["rounds"])
    assert result["gate"]["chosen_config"] == "2,1,3"


def test_profile_mode_predicts_each_depth_before_any_sweep(
    ctx: RecordingContext, tiny_pair: TinyPair, tmp_path: Path
) -> None:
    """mode profile: each server alone, one wave per concurrency, no rounds and no gate; the prediction for
    every depth with an acceptance length, depth 5 (never launched) from the line through depths 1 and 3."""
    prompts = tmp_path / "ids.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in tiny_pair.prompts))
    params = BenchmarkParams(
        mode="profile",
        launch=_reference_launch(tiny_pair),
        prompts=str(prompts),
        depths=[1, 3],
        concurrencies=[1, 2],
        accept_lengths={1: 1.5, 3: 2.0, 5: 2.2},
        max_new_tokens=8,
        warmup_requests=0,
        smoke=False,
    )
    result = benchmark_stage.run(ctx, params)
    assert result["mode"] == "profile"
    servers = ctx.recording.of_type("server")
    assert [(e["config"], e["state"]) for e in servers if e["state"] in ("ready", "stopped")] == [
        (None, "ready"),
        (None, "stopped"),
        ("1,1,2", "ready"),
        ("1,1,2", "stopped"),
        ("3,1,4", "ready"),
        ("3,1,4", "stopped"),
    ], "one server at a time"
    assert ctx.recording.of_type("benchmark_round") == [], "nothing measured in rounds"
    levels = result["cost_profile"]["by_concurrency"]
    assert [level["concurrency"] for level in levels] == [1, 2]
    predicted = {(p["config"], p["concurrency"]): p for p in result["predictions"]}
    assert set(predicted) == {(c, level) for c in ("1,1,2", "3,1,4", "5,1,6") for level in (1, 2)}
    for (config, level), entry in predicted.items():
        fit = levels[level - 1]["chain_fit"]
        assert entry["cycle"] == ("chain fit" if config == "5,1,6" else "measured")
        if config == "5,1,6" and fit is None:  # the CPU's cycles did not grow with depth: nothing to fit
            assert entry["predicted_speedup"] is None
        else:
            assert entry["predicted_speedup"] > 0
    assert any(line.startswith("predicted: 3,1,4 at concurrency 1:") for line in ctx.lines)


def row(config: str | None, mean: float, low: float | None = None, **fields: Any) -> dict[str, Any]:
    steps = None if config is None else int(config.split(",")[0])
    base = {
        "config": config,
        "label": "baseline (no speculation)" if config is None else config,
        "steps": steps,
        "output_tok_s": 100.0 * mean,
        "speedup": mean,
        "speedup_ci_low": low if config is not None else None,
        "speedup_ci_high": None if low is None else round(2 * mean - low, 4),
        "speedup_n": 5,
        "outputs_match": True if config is not None else None,
        "failed_requests": 0,
        "accept_len": None if config is None else 2.0,
    }
    return {**base, **fields}


def test_gate_passes_when_the_best_lower_bound_is_above_the_threshold() -> None:
    rows = [row(None, 1.0), row("16,1,17", 0.9, 0.8), row("10,1,11", 1.5, 1.3), row("5,1,6", 1.6, 1.1)]
    gate = release_gate(rows, None, 1.0)
    assert gate["deployable"] is True
    assert gate["reasons"] == []
    assert gate["chosen_config"] == "10,1,11", "the highest lower bound wins, not the highest mean"
    assert (gate["chosen_depth"], gate["speedup"], gate["speedup_ci_low"]) == (10, 1.5, 1.3)
    assert gate["verdict"] == (
        "deployable at 10,1,11: the speedup's lower bound 1.3 is above the threshold 1.0 "
        "(speedup 1.5, 95 % CI 1.3–1.7 over 5 requests)"
    )


def test_gate_refuses_a_mean_above_the_threshold_whose_lower_bound_is_not() -> None:
    gate = release_gate([row(None, 1.0), row("5,1,6", 1.2, 0.95)], None, 1.0)
    assert gate["deployable"] is False
    assert gate["reasons"] == [
        "5,1,6: the speedup's lower bound 0.95 is not above the threshold 1.0 "
        "(speedup 1.2, 95 % CI 0.95–1.45 over 5 requests)"
    ]
    assert gate["verdict"].startswith("not deployable: 5,1,6: the speedup's lower bound 0.95")
    at_threshold = release_gate([row(None, 1.0), row("5,1,6", 1.2, 1.0)], None, 1.0)
    assert at_threshold["deployable"] is False, "a lower bound equal to the threshold is not above it"


def test_a_threshold_of_zero_requires_no_speedup_and_the_verdict_says_so() -> None:
    wide = row("5,1,6", 0.5, 0.1, speedup_half_width=0.4)
    gate = release_gate([row(None, 1.0), wide], None, 0.0)
    assert gate["deployable"] is True, "outputs passed: the pipeline goes on"
    assert gate["outcome"] == "deployable", "no speedup asked for: nothing to be inconclusive about"
    assert gate["speedup_required"] is False
    assert gate["verdict"] == (
        "no speedup required at 5,1,6: threshold 0.0; speedup 0.5, 95 % CI 0.1–0.9 over 5 requests "
        "(slower than the baseline)"
    )
    assert "deployable" not in gate["verdict"], "a slowdown is never called deployable"
    mismatch = release_gate([row(None, 1.0), row("5,1,6", 0.5, 0.4, outputs_match=False)], None, 0.0)
    assert mismatch["deployable"] is False, "outputs are still judged"
    assert mismatch["verdict"].startswith("not deployable: ")
    required = release_gate([row(None, 1.0), row("5,1,6", 1.5, 1.3)], None, 1.0)
    assert required["speedup_required"] is True
    assert required["verdict"].startswith("deployable at 5,1,6: ")


def test_gate_judges_the_chosen_config_not_the_best() -> None:
    rows = [row(None, 1.0), row("16,1,17", 0.9, 0.8), row("10,1,11", 1.5, 1.3)]
    gate = release_gate(rows, SpecConfig.chain(16), 1.0)
    assert gate["deployable"] is False
    assert gate["chosen_config"] == "16,1,17"
    assert gate["reasons"][0].startswith("16,1,17: the speedup's lower bound 0.8 is not above")


def test_gate_without_an_interval_refuses() -> None:
    gate = release_gate([row(None, 1.0), row("5,1,6", 1.5, None)], SpecConfig.chain(5), 1.0)
    assert gate["reasons"] == ["5,1,6: speedup 1.5 from 5 request(s) has no confidence interval"]


def test_gate_fails_on_any_output_mismatch_or_failed_request() -> None:
    rows = [
        row(None, 1.0),
        row("16,1,17", 3.0, 2.0, outputs_match=False),
        row("10,1,11", 2.0, 1.5, failed_requests=2),
    ]
    gate = release_gate(rows, None, 1.0)
    assert gate["deployable"] is False
    assert "16,1,17: greedy outputs differ from the baseline's" in gate["reasons"]
    assert "10,1,11: 2 request(s) failed" in gate["reasons"]


def test_gate_fails_when_outputs_could_not_be_compared() -> None:
    gate = release_gate([row(None, 1.0), row("5,1,6", 2.0, 1.5, outputs_match=None)], None, 1.0)
    assert gate["reasons"] == ["5,1,6: outputs could not be compared"]


def test_table_text_has_a_line_per_run() -> None:
    text = format_table([row(None, 1.0), row("5,4,8", 2.0, 1.5)])
    assert text.splitlines()[0].split()[:4] == ["run", "accept_len", "output_tok_s", "speedup"]
    assert text.splitlines()[2].startswith("5,4,8")


def test_a_tree_the_resolved_engine_cannot_serve_is_refused_before_any_server_starts(
    ctx: RecordingContext, tiny_pair: TinyPair
) -> None:
    # engine auto passes at submit; on this host (no GPU in the job) it resolves to the reference engine,
    # which drafts chains only: the sweep must say so before spending a baseline launch on it
    params = BenchmarkParams(
        mode="sweep",
        launch={"engine": "auto", "model": str(tiny_pair.target), "draft": str(tiny_pair.draft)},
        configs=[{"steps": 3, "topk": 1, "draft_tokens": 4}, {"steps": 2, "topk": 2, "draft_tokens": 5}],
    )
    with pytest.raises(StageError) as caught:
        benchmark_stage.run(ctx, params)
    assert caught.value.reason is TerminationReason.LAUNCH_CHECK_FAILED
    assert "sweep refused before starting anything: 2,2,5: REFERENCE_TREE_UNSUPPORTED" in caught.value.message
    assert ctx.recording.of_type("server") == []


def _reference_launch(tiny_pair: TinyPair) -> dict[str, object]:
    """The sweep's server spec on the CPU reference engine, serving the tiny pair."""
    return {
        "engine": "reference",
        "model": str(tiny_pair.target),
        "draft": str(tiny_pair.draft),
        "max_running_requests": 4,
        "port": free_port(),
        "ready_timeout_s": 120,
    }
