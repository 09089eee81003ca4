"""`real_model.py recipes --recipe-set NAME`: every variant is a valid train step of the GPU recipe's pipeline
(a misspelt or conflicting key would cost a GPU session its recipes call: the train params forbid both)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

from journey_api import TRAIN_SETTINGS
from real_model import RECIPE_SETS

from contract.params.train import TrainParams

PIPELINE_TRAIN = {  # the GPU recipe's train step (drafting/realmodels/demo.py), as real_model.py reads it
    "epochs": 10, "ttt_steps": 7, "lr": 1e-3, "batch_size": 32, "max_len": 1024, "step_decay": 0.8,
    "warmup_ratio": 0.015, "draft_vocab_size": 32000, "val_fraction": 0.05, "seed": 0,
}  # fmt: skip


@pytest.mark.parametrize("recipe_set", sorted(RECIPE_SETS))
def test_every_variant_is_a_valid_train_step(recipe_set: str, tmp_path: Path) -> None:
    assert set(PIPELINE_TRAIN) == set(TRAIN_SETTINGS)
    base = {**PIPELINE_TRAIN, "device": "cuda", "data": str(tmp_path), "target": str(tmp_path)}
    variants = RECIPE_SETS[recipe_set]
    assert variants
    for name, overrides in variants.items():
        params = TrainParams.model_validate({**base, **overrides, "output": str(tmp_path / name)})
        for key, value in overrides.items():
            assert getattr(params, key) == value
