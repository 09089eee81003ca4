"""torch.compile of the drafter (the stage's default on GPUs): the same losses as eager, and a broken compiler
costs a warning, never the run."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from contract.params.train import TrainParams
from drafting.stages import train
from drafting.stages.base import RecordingSink, StageContext
from tests.ml.stage_process import run_stage_process
from tests.ml.tiny import TINY_CONFIG, cpu_train_params, successor_extraction


@pytest.fixture(scope="module")
def extraction(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compile")
    return successor_extraction(root, conversations=4, turns=1, words=8, seed=1, max_len=64)


def _params(extraction: tuple[Path, Path], output: Path, **overrides: Any) -> TrainParams:
    target, data = extraction
    values = {
        "ttt_steps": 2, "batch_size": 2, "max_steps": 2, "val_fraction": 0.0,
        "draft_vocab_size": TINY_CONFIG["vocab_size"], **overrides,
    }  # fmt: skip
    return cpu_train_params(target, data, output, **values)


def _losses(sink: RecordingSink) -> dict[int, float]:
    return {e["step"]: e["value"] for e in sink.of_type("metric") if e["name"] == "train/loss"}


@pytest.mark.timeout(900)  # torch.compile's first compile on 2 shared cores can pass the 300 s default
def test_compiled_drafter_trains_like_the_eager_one(extraction: tuple[Path, Path], tmp_path: Path) -> None:
    eager, compiled = RecordingSink(), RecordingSink()
    train.run(StageContext(work_dir=tmp_path, sink=eager), _params(extraction, tmp_path / "e", compile=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train.run(
            StageContext(work_dir=tmp_path, sink=compiled), _params(extraction, tmp_path / "c", compile=True)
        )
    assert not [w for w in caught if "training eagerly" in str(w.message)], (
        "it fell back instead of compiling"
    )
    assert sorted(_losses(compiled)) == [1, 2]
    assert _losses(compiled) == pytest.approx(_losses(eager), rel=1e-5)


def test_a_broken_compiler_falls_back_to_eager_with_a_warning(
    extraction: tuple[Path, Path], tmp_path: Path
) -> None:
    """A host whose C++ compiler is broken (CXX points at /bin/false): the stage runs as the worker runs it,
    a process of its own, and must warn and train eagerly."""
    env = {"CXX": "/bin/false", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    run = run_stage_process("train", _params(extraction, tmp_path / "out", compile=True), tmp_path, env=env)
    assert run.result.exit_code == 0, run.log
    assert "torch.compile of the drafter failed, training eagerly" in run.log
    outcome = run.of_type("result")
    assert outcome
    assert outcome[0]["result"]["global_step"] == 2
