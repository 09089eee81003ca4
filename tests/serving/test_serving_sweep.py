"""The depth sweep end to end with the reference engine, and the release gate's rules."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.benchmarks.paired import compare
from contract.params.benchmark import BenchmarkParams, SpecConfig
from contract.reasons import TerminationReason
from drafting.serving import benchmarking
from drafting.serving.sweep import format_table, release_gate, run_sweep
from drafting.stages import benchmark as benchmark_stage
from drafting.stages.base import StageError, stage_prompts
from tests.conftest import free_port
from tests.serving.conftest import RecordingContext
from testsupport.tiny_pair import TinyPair


def test_sweep_keeps_the_baseline_up_and_alternates_its_batches_with_each_config(
    ctx: RecordingContext, tiny_pair: TinyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request log (every batch the load client sends, to which server, when) shows the interleaving:
    per config B S, S B, B S…, the same prompts each time, the baseline server alive throughout."""
    sent: list[tuple[str, int, float]] = []
    real_run_load = benchmarking.run_load

    def logged_run_load(url: str, prompts: Any, options: Any) -> Any:
        sent.append((url.rstrip("/"), len(prompts), time.monotonic()))
        return real_run_load(url, prompts, options)

    monkeypatch.setattr(benchmarking, "run_load", logged_run_load)
    prompts = tmp_path / "ids.jsonl"
    categories = ["even" if i % 2 == 0 else "odd" for i in range(len(tiny_pair.prompts))]
    records = zip(tiny_pair.prompts, categories, strict=True)
    prompts.write_text("\n".join(json.dumps({"input_ids": p, "category": c}) for p, c in records))
    params = BenchmarkParams(
        mode="sweep",
        launch=_reference_launch(tiny_pair),
        configs=[{"steps": 3, "topk": 1, "draft_tokens": 4}, {"steps": 1, "topk": 1, "draft_tokens": 2}],
        repeats=3,
        prompts=str(prompts),
        max_new_tokens=16,
        warmup_requests=0,
        timing="stream",
        speedup_threshold=1e9,  # unreachable: the stage must fail after emitting the table
        smoke_min_accept_length=1.0,  # a 30-step fit on a random target: the smoke judges its outputs only
    )
    with pytest.raises(StageError) as caught:
        benchmark_stage.run(ctx, params)
    failure = caught.value
    assert failure.reason is TerminationReason.RELEASE_GATE_FAILED
    result = failure.details
    assert result["interleaved"] is True
    assert result["repeats"] == 3
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
    measured = [(url, count) for url, count, _ in sent if count == len(tiny_pair.prompts)]
    side = {baseline_url: "B", first_url: "S", second_url: "S"}
    assert "".join(side[url] for url, _ in measured) == "BSSBBS" * 2
    assert [url for url, _ in measured].count(baseline_url) == 6, "one baseline server for both configs"
    rounds = ctx.recording.of_type("benchmark_round")
    assert [(r["config"], r["round"], r["order"][0]) for r in rounds] == [
        ("3,1,4", 1, "baseline"),
        ("3,1,4", 2, "speculative"),
        ("3,1,4", 3, "baseline"),
        ("1,1,2", 1, "baseline"),
        ("1,1,2", 2, "speculative"),
        ("1,1,2", 3, "baseline"),
    ]
    for entry in rounds:  # the batches of a round ran one after the other, never overlapping
        first, second = entry["batches"]
        assert first["ended_at"] <= second["started_at"]
        assert entry["speedup"] == pytest.approx(
            entry["speculative_tok_s"] / entry["baseline_tok_s"], rel=1e-3
        )
    rows = result["rows"]
    assert [row["config"] for row in rows] == [None, "3,1,4", "1,1,2"]
    assert rows[0]["batches"] == 6
    assert rows[0]["speedup"] == 1.0
    assert rows[0]["accept_len"] is None
    for row in rows[1:]:
        assert row["outputs_match"] is True
        assert row["mismatched_requests"] == 0
        assert row["accept_len"] > 1.0, "fitted drafter: plumbing check, not quality"
        assert row["speedup_n"] == 3
        assert row["speedup_ci_low"] < row["speedup"] < row["speedup_ci_high"]
        assert row["timing"] == "stream"
        assert row["ttft_p50_ms"] is not None
        # acceptance per prompt category, over the 3 rounds: prompts counted once, tokens and steps summed
        per_category = row["by_category"]
        assert list(per_category) == ["even", "odd"]
        for name, stats in per_category.items():
            assert stats["prompts"] == categories.count(name)
            assert stats["completion_tokens"] == categories.count(name) * 16 * 3  # ignore_eos
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
        assert [p["completion_tokens"] for p in row["per_prompt"]] == [16 * 3] * len(tiny_pair.prompts)
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
    assert row["speedup_n"] == 2
    assert len(row["rounds"]) == 2
    assert all(r["order"] == ["baseline", "speculative"] for r in row["rounds"])
    assert result["gate"]["chosen_config"] == "2,1,3"


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
        "(mean 1.5, 95 % CI 1.3–1.7, n 5)"
    )


def test_gate_refuses_a_mean_above_the_threshold_whose_lower_bound_is_not() -> None:
    gate = release_gate([row(None, 1.0), row("5,1,6", 1.2, 0.95)], None, 1.0)
    assert gate["deployable"] is False
    assert gate["reasons"] == [
        "5,1,6: the speedup's lower bound 0.95 is not above the threshold 1.0 "
        "(mean 1.2, 95 % CI 0.95–1.45, n 5)"
    ]
    assert gate["verdict"].startswith("not deployable: 5,1,6: the speedup's lower bound 0.95")
    at_threshold = release_gate([row(None, 1.0), row("5,1,6", 1.2, 1.0)], None, 1.0)
    assert at_threshold["deployable"] is False, "a lower bound equal to the threshold is not above it"


def test_a_threshold_of_zero_asks_for_no_speedup_even_when_few_rounds_reach_below_zero() -> None:
    gate = release_gate([row(None, 1.0), row("5,1,6", 0.5, -0.3)], None, 0.0)
    assert gate["deployable"] is True
    assert gate["verdict"] == (
        "deployable at 5,1,6: no speedup asked for (threshold 0.0); speedup mean 0.5, 95 % CI -0.3–1.3, n 5"
    )
    mismatch = release_gate([row(None, 1.0), row("5,1,6", 0.5, 0.4, outputs_match=False)], None, 0.0)
    assert mismatch["deployable"] is False, "outputs are still judged"


def test_gate_judges_the_chosen_config_not_the_best() -> None:
    rows = [row(None, 1.0), row("16,1,17", 0.9, 0.8), row("10,1,11", 1.5, 1.3)]
    gate = release_gate(rows, SpecConfig.chain(16), 1.0)
    assert gate["deployable"] is False
    assert gate["chosen_config"] == "16,1,17"
    assert gate["reasons"][0].startswith("16,1,17: the speedup's lower bound 0.8 is not above")


def test_gate_without_an_interval_refuses() -> None:
    gate = release_gate([row(None, 1.0), row("5,1,6", 1.5, None)], SpecConfig.chain(5), 1.0)
    assert gate["reasons"] == ["5,1,6: speedup 1.5 from 5 round(s) has no confidence interval"]


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
