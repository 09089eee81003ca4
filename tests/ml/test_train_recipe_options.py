"""The train stage's recipe options that speculators' trainer uses by default (issue 15's side by side):
lm_head kept frozen at the target's rows, and `norm_output` (each TTT step reads the previous step's normed
output), trained as served."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from contract.params.train import TrainParams
from drafting.checkpoint import diagnose
from drafting.context import RecordingSink, StageContext
from drafting.findings import Severity
from drafting.ml.drafter import load_drafter
from drafting.ml.target_head import load_target_head
from drafting.stages import train
from testsupport.tiny_targets import cpu_train_params, successor_extraction

DRAFT_VOCAB = 48


@pytest.fixture(scope="module")
def learnable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("recipe")
    return successor_extraction(root, conversations=24, turns=2, words=10, seed=3, max_len=64)


def _run(
    target: Path, data: Path, output: Path, **overrides: Any
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    values = {
        "epochs": 1, "ttt_steps": 3, "batch_size": 2, "lr": 1e-2, "warmup_steps": 0,
        "draft_vocab_size": DRAFT_VOCAB, "val_fraction": 0.2, **overrides,
    }  # fmt: skip
    sink = RecordingSink()
    result = train.run(
        StageContext(work_dir=output.parent, sink=sink), cpu_train_params(target, data, output, **values)
    )
    losses: dict[str, list[float]] = {}
    for event in sink.of_type("metric"):
        if event["name"] in ("train/loss", "train/loss_0"):
            losses.setdefault(event["name"], []).append(event["value"])
    return result, losses


def _target_rows(target: Path, checkpoint: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(the checkpoint's lm_head, the target's lm_head rows of its draft vocab) in float32."""
    tensors = load_file(checkpoint / "model.safetensors")
    d2t = tensors["d2t"]
    draft_ids = torch.arange(d2t.numel()) + d2t
    rows = load_target_head(target).lm_head[draft_ids].float()
    return tensors["lm_head.weight"].float(), rows


def test_a_frozen_lm_head_keeps_the_targets_rows(learnable: tuple[Path, Path], tmp_path: Path) -> None:
    target, data = learnable
    frozen, _ = _run(target, data, tmp_path / "frozen", train_lm_head=False, epochs=3)
    trained, _ = _run(target, data, tmp_path / "trained", train_lm_head=True)
    saved, rows = _target_rows(target, Path(frozen["checkpoint"]))
    torch.testing.assert_close(saved, rows.to(saved.dtype).float())  # as it started, to the saved dtype
    trained_head, _ = _target_rows(target, Path(trained["checkpoint"]))
    assert not torch.allclose(trained_head, rows, atol=1e-3)  # trained, it moves: the check bites
    val_loss = [epoch["val/loss"] for epoch in frozen["epochs"]]
    assert val_loss[-1] < val_loss[0]  # the rest of the drafter still learns


def test_norm_output_trains_as_it_is_served(learnable: tuple[Path, Path], tmp_path: Path) -> None:
    target, data = learnable
    normed, normed_losses = _run(target, data, tmp_path / "normed", norm_output=True)
    _, plain_losses = _run(target, data, tmp_path / "plain", norm_output=False)
    checkpoint = Path(normed["checkpoint"])
    assert json.loads((checkpoint / "config.json").read_text())["norm_output"] is True
    embed = load_target_head(target).embed
    assert load_drafter(checkpoint, target_embed=embed, device="cpu", dtype=torch.float32).norm_output
    report = diagnose(checkpoint, target=target)  # SGLang 0.5.14 serves norm_output: no error
    assert [f for f in report.findings if f.severity == Severity.ERROR] == []
    # the first optimizer step starts from the same weights: TTT step 0 reads the target's states alike, the
    # later TTT steps read another feature
    assert normed_losses["train/loss_0"][0] == pytest.approx(plain_losses["train/loss_0"][0])
    assert normed_losses["train/loss"][0] != pytest.approx(plain_losses["train/loss"][0])


def test_the_defaults_are_speculators_recipe_and_a_random_head_is_trained(tmp_path: Path) -> None:
    """GPU run 14 made norm_output and the frozen head the defaults; a random head is trained unless the
    request says otherwise (frozen, it would never learn)."""
    paths = {"data": str(tmp_path), "target": str(tmp_path), "output": str(tmp_path / "o")}
    default = TrainParams(**paths)
    assert (default.norm_output, default.train_lm_head, default.init_lm_head) == (True, False, "target")
    assert TrainParams(**paths, init_lm_head="random").train_lm_head is True


def test_a_frozen_random_lm_head_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="train_lm_head false .* needs init_lm_head 'target'"):
        TrainParams(
            data=str(tmp_path), target=str(tmp_path), output=str(tmp_path / "o"),
            train_lm_head=False, init_lm_head="random",
        )  # fmt: skip
