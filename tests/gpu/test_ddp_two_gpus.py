"""Data-parallel training on two real GPUs: the train stage as two torchrun ranks over NCCL (batch 1 each)
against one process on the global batch (batch 2), float32: the same losses step by step and the same
weights at the end (the CPU test of the same, tests/ml/test_ranks.py, on GPUs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contract.params.train import TrainParams
from drafting.context import RecordingSink, StageContext
from drafting.ml.train_state import load_state
from drafting.stages import train
from tests.gpu._child import in_child
from testsupport.tiny_targets import TINY_CONFIG, successor_extraction


def losses_and_weights(root: Path) -> dict[str, Any]:
    target, data = successor_extraction(root, conversations=2, turns=1, words=10, seed=3, max_len=64)
    common = {
        "target": str(target), "data": str(data), "device": "cuda", "dtype": "float32", "ttt_steps": 2,
        "lr": 1e-2, "warmup_steps": 0, "schedule": "constant", "val_fraction": 0.0, "epochs": 4,
        "draft_vocab_size": TINY_CONFIG["vocab_size"], "loader_workers": 0, "compile": False,
    }  # fmt: skip
    losses: dict[str, dict[int, float]] = {}
    for name, gpus, batch in (("one_gpu", (0,), 2), ("two_ranks", (0, 1), 1)):
        sink = RecordingSink()
        params = TrainParams(**common, output=str(root / name), batch_size=batch)
        train.run(StageContext(work_dir=root / f"work_{name}", sink=sink, gpus=gpus), params)
        losses[name] = {e["step"]: e["value"] for e in sink.of_type("metric") if e["name"] == "train/loss"}
    one, two = (load_state(root / name)["drafter"] for name in ("one_gpu", "two_ranks"))  # type: ignore[index]
    weight_diff = max(float((one[k] - two[k]).abs().max()) for k in one if one[k].is_floating_point())
    return {"losses": losses, "max_weight_abs_diff": weight_diff}


@pytest.mark.gpus(2)
def test_two_ranks_train_as_one_process_on_the_global_batch(tmp_path: Path) -> None:
    out = in_child(losses_and_weights, tmp_path)
    one, two = out["losses"]["one_gpu"], out["losses"]["two_ranks"]
    assert one
    assert set(one) == set(two)
    assert max(abs(two[step] - loss) / abs(loss) for step, loss in one.items()) < 1e-5
    assert out["max_weight_abs_diff"] < 1e-3
