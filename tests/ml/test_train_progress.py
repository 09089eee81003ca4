"""The train stage's final progress: 1.0 for a whole run, the share of planned steps after max_steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from drafting.context import RecordingSink, StageContext
from drafting.stages import train
from testsupport.tiny_targets import cpu_train_params, successor_extraction


@pytest.fixture(scope="module")
def learnable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("progress")
    return successor_extraction(root, conversations=12, turns=1, words=8, seed=3, max_len=48)


def _final_progress(target: Path, data: Path, output: Path, **overrides: object) -> tuple[dict, dict]:
    sink = RecordingSink()
    params = cpu_train_params(
        target, data, output, epochs=2, ttt_steps=2, batch_size=2, lr=1e-3, warmup_steps=0,
        draft_vocab_size=32, val_fraction=0.0, **overrides,
    )  # fmt: skip
    result = train.run(StageContext(work_dir=output.parent, sink=sink), params)
    return result, sink.of_type("progress")[-1]


def test_a_max_steps_stop_reports_the_share_of_planned_steps(
    learnable: tuple[Path, Path], tmp_path: Path
) -> None:
    target, data = learnable
    result, progress = _final_progress(target, data, tmp_path / "partial", max_steps=2)
    assert result["completed"] is False
    assert result["global_step"] == 2
    assert result["total_steps"] > 2
    assert progress["fraction"] == pytest.approx(2 / result["total_steps"])
    assert "max_steps=2" in progress["message"]


def test_a_complete_run_reports_done(learnable: tuple[Path, Path], tmp_path: Path) -> None:
    target, data = learnable
    result, progress = _final_progress(target, data, tmp_path / "whole")
    assert result["completed"] is True
    assert result["global_step"] == result["total_steps"]
    assert progress == {"type": "progress", "fraction": 1.0, "message": "done"}
