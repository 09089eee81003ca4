"""The depth sweep end to end with the reference engine, and the release gate's rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from contract.params.benchmark import BenchmarkParams
from contract.reasons import TerminationReason
from drafting.serving.sweep import format_table, release_gate
from drafting.stages import benchmark as benchmark_stage
from drafting.stages.base import StageError
from tests.conftest import free_port
from tests.serving.conftest import RecordingContext
from tests.serving.serving_tiny_models import TinyPair


def test_sweep_launches_baseline_and_each_depth_then_the_gate_fails_non_zero(
    ctx: RecordingContext, tiny_pair: TinyPair, tmp_path: Path
) -> None:
    prompts = tmp_path / "ids.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in tiny_pair.prompts))
    params = BenchmarkParams(
        mode="sweep",
        launch={
            "engine": "reference",
            "model": str(tiny_pair.target),
            "draft": str(tiny_pair.draft),
            "max_running_requests": 4,
            "port": free_port(),
            "ready_timeout_s": 120,
        },
        depths=[3, 1],
        prompts=str(prompts),
        max_new_tokens=24,
        warmup_requests=1,
        speedup_threshold=1e9,  # unreachable: the stage must fail after emitting the table
        smoke_min_accept_length=1.0,  # a 30-step fit on a random target: the smoke judges its outputs only
    )
    with pytest.raises(StageError) as caught:
        benchmark_stage.run(ctx, params)
    failure = caught.value
    assert failure.reason is TerminationReason.RELEASE_GATE_FAILED
    rows = failure.details["rows"]
    assert [row["depth"] for row in rows] == [None, 3, 1]
    assert [row["outputs_match"] for row in rows] == [True, True, True]
    assert rows[0]["accept_len"] is None
    assert rows[0]["speedup"] == 1.0
    assert all(row["accept_len"] > 1.0 for row in rows[1:]), "fitted drafter: plumbing check, not quality"
    assert all(row["timing"] == "stream" and row["ttft_p50_ms"] is not None for row in rows)
    [table] = ctx.recording.of_type("benchmark_table")
    assert table["gate"]["deployable"] is False
    assert "not above the threshold" in failure.message
    assert any(line.startswith("depth sweep:") for line in ctx.lines)
    servers = ctx.recording.of_type("server")
    assert [e["state"] for e in servers].count("stopped") == 3
    assert [e["depth"] for e in servers if e["state"] == "ready"] == [None, 3, 1]
    assert not any(psutil.pid_exists(e["pid"]) for e in servers)


def row(depth: int | None, speed: float, **fields: Any) -> dict[str, Any]:
    base = {
        "depth": depth,
        "label": "baseline" if depth is None else f"depth {depth}",
        "output_tok_s": speed,
        "speedup": round(speed / 100.0, 4),
        "outputs_match": True if depth is not None else None,
        "failed_requests": 0,
        "accept_len": None if depth is None else 2.0,
    }
    return {**base, **fields}


def test_gate_passes_when_outputs_match_and_the_fastest_depth_beats_the_threshold() -> None:
    gate = release_gate([row(None, 100), row(16, 90), row(10, 150), row(5, 130)], None, 1.0)
    assert gate == {"deployable": True, "chosen_depth": 10, "speedup": 1.5, "threshold": 1.0, "reasons": []}


def test_gate_judges_the_chosen_depth_not_the_fastest() -> None:
    gate = release_gate([row(None, 100), row(16, 90), row(10, 150)], 16, 1.0)
    assert gate["deployable"] is False
    assert gate["reasons"] == ["depth 16: speedup 0.9 is not above the threshold 1.0"]


def test_gate_fails_on_any_output_mismatch_or_failed_request() -> None:
    rows = [row(None, 100), row(16, 300, outputs_match=False), row(10, 200, failed_requests=2)]
    gate = release_gate(rows, None, 1.0)
    assert gate["deployable"] is False
    assert "depth 16: greedy outputs differ from the baseline's" in gate["reasons"]
    assert "depth 10: 2 request(s) failed" in gate["reasons"]


def test_gate_fails_when_outputs_could_not_be_compared() -> None:
    gate = release_gate([row(None, 100), row(5, 200, outputs_match=None)], None, 1.0)
    assert gate["reasons"] == ["depth 5: outputs could not be compared"]


def test_table_text_has_a_line_per_run() -> None:
    text = format_table([row(None, 100), row(5, 200)])
    assert text.splitlines()[0].split()[:3] == ["run", "accept_len", "output_tok_s"]
    assert text.splitlines()[2].startswith("depth 5")
