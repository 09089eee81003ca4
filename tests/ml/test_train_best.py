"""The acceptance estimate's formula, and the train stage handing on its best epoch by that estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from contract.params.train import TrainParams
from drafting.context import RecordingSink, StageContext
from drafting.ml import trainer as trainer_module
from drafting.ml.checkpoint_choice import choose
from drafting.ml.objective import accept_length, summarise
from drafting.ml.trainer import OptimSettings
from drafting.stages import train
from testsupport.tiny_targets import cpu_train_params, successor_extraction

STEPS_PER_EPOCH = 16  # 40 conversations, 8 held out, batches of 2


def test_accept_length_is_sglangs_chain_formula() -> None:
    # 1 + p1 + p1 p2 + p1 p2 p3 with p = 0.8, 0.5, 0.25: 1 + 0.8 + 0.4 + 0.1
    assert accept_length([0.8, 0.5, 0.25], 3) == pytest.approx(2.3)
    assert accept_length([0.8, 0.5, 0.25], 1) == pytest.approx(1.8)
    with pytest.raises(ValueError, match="depth 4"):
        accept_length([0.8, 0.5, 0.25], 4)


def test_summarise_states_the_conditional_rates_and_the_estimate_per_depth() -> None:
    # rows: loss_sum, loss_count, correct, chain_correct, count over 4 TTT steps
    sums = torch.tensor(
        [[1.0] * 4, [10.0] * 4, [8.0, 7.0, 6.0, 5.0], [8.0, 4.0, 1.0, 0.5], [10.0] * 4], dtype=torch.float64
    )
    metrics = summarise(sums, [1.0] * 4, depths=(3, 5))
    conditional = [metrics[f"cond_acc_{k}"] for k in range(4)]
    assert conditional == pytest.approx([0.8, 0.5, 0.25, 0.5])
    assert metrics["est_accept_len_d3"] == pytest.approx(2.3)  # 1 + 0.8 + 0.4 + 0.1 (the full_acc_k sum)
    assert metrics["est_accept_len"] == pytest.approx(2.35)  # the whole unroll: + 0.05
    assert "est_accept_len_d5" not in metrics  # past the unroll: never validated, never reported
    assert metrics["acc_1"] == pytest.approx(0.7)  # marginal: not the conditional 0.5


def test_choose_weighs_every_recorded_epoch() -> None:
    epochs = [
        {"epoch": 1.0, "val/est_accept_len_d5": 2.0},
        {"epoch": 2.0, "val/full_acc_0": 0.9, "val/full_acc_1": 0.8},  # an older record: from full_acc_k
        {"epoch": 3.0, "val/est_accept_len_d5": 1.5},
    ]
    best, last = choose(epochs, depth=2, keep="best"), choose(epochs, depth=5, keep="last")
    unvalidated = choose([{"epoch": 1.0}, {"epoch": 2.0}], depth=5, keep="best")
    assert best is not None
    assert last is not None
    assert unvalidated is not None
    assert best.best == {
        "epoch": 2, "accept_len": pytest.approx(2.7), "depth": 2, "source": "val",
        "metric": "est_accept_len_d2",
    }  # fmt: skip
    assert (last.epoch, last.best) == (
        3, {"epoch": 1, "accept_len": 2.0, "depth": 5, "source": "val", "metric": "est_accept_len_d5"}
    )  # fmt: skip
    assert (unvalidated.epoch, unvalidated.best) == (2, None)
    assert choose([], depth=5, keep="best") is None


def test_choose_prefers_the_simulated_acceptance_over_the_per_position_estimate() -> None:
    # Epoch 1 looks best per position, epoch 2 decodes better cycle by cycle: serving decides.
    epochs = [
        {"epoch": 1.0, "val/est_accept_len_d5": 2.6, "val/sim_accept_len_d5": 1.7},
        {"epoch": 2.0, "val/est_accept_len_d5": 2.4, "val/sim_accept_len_d5": 1.8},
    ]
    chosen = choose(epochs, depth=5, keep="best")
    assert chosen is not None
    assert chosen.best == {
        "epoch": 2, "accept_len": 1.8, "depth": 5, "source": "val", "metric": "sim_accept_len_d5"
    }  # fmt: skip


def test_select_depth_cannot_pass_the_unroll(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="past ttt_steps"):
        cpu_train_params(tmp_path, tmp_path, tmp_path, ttt_steps=3, select_depth=4)
    assert cpu_train_params(tmp_path, tmp_path, tmp_path, ttt_steps=3).choice_depth == 3
    assert cpu_train_params(tmp_path, tmp_path, tmp_path).choice_depth == 5


@pytest.fixture(scope="module")
def learnable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("best")
    return successor_extraction(root, conversations=40, turns=2, words=12, seed=1, max_len=96)


def _ascent_after_first_epoch(step: int, settings: OptimSettings) -> float:
    """The first epoch learns; from then on the learning rate is negative (gradient ascent), so every later
    epoch is worse than the first on the held-out split by construction, not by chance."""
    return 1.0 if step < STEPS_PER_EPOCH else -1.0


def _run(params: TrainParams) -> tuple[dict[str, Any], RecordingSink]:
    sink = RecordingSink()
    return train.run(StageContext(work_dir=Path(params.output).parent, sink=sink), params), sink


def _handed_on(sink: RecordingSink) -> list[str]:
    return [e["path"] for e in sink.of_type("artifact") if e["kind"] == "best_drafter"]


def test_a_run_whose_best_epoch_is_not_the_last_hands_on_the_best(
    learnable: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainer_module, "lr_factor", _ascent_after_first_epoch)
    target, data = learnable
    output = tmp_path / "run"
    values: dict[str, Any] = {
        "epochs": 3, "ttt_steps": 5, "batch_size": 2, "lr": 1e-2, "warmup_steps": 0, "schedule": "constant",
        "draft_vocab_size": 48, "val_fraction": 0.2, "init_lm_head": "random",
    }  # fmt: skip
    # The first job stops inside epoch 2: the resumed one must still weigh epoch 1 (kept in run.json).
    first, sink = _run(cpu_train_params(target, data, output, max_steps=STEPS_PER_EPOCH + 1, **values))
    assert first["epochs_done"] == 1
    assert _handed_on(sink) == [str(output / "epoch_1")]
    result, sink = _run(cpu_train_params(target, data, output, **values))
    assert result["epochs_done"] == 3
    estimates = [e["val/sim_accept_len_d5"] for e in result["epochs"]]  # serving replayed: what is chosen by
    assert estimates[0] > max(estimates[1:]) + 0.1, estimates  # the best epoch is the first, not the last
    assert result["best"] == {
        "epoch": 1, "accept_len": estimates[0], "depth": 5, "source": "val",
        "metric": "sim_accept_len_d5", "checkpoint": str(output / "epoch_1"),
    }  # fmt: skip
    assert result["selected"] == str(output / "epoch_1")
    assert result["checkpoint"] == str(output / "epoch_3")  # still the last epoch's, as before
    assert "prod" in result["accept_formula"]
    assert "cycle by cycle" in result["simulated_formula"]
    assert _handed_on(sink) == [str(output / "epoch_1")]
    assert (output / "epoch_1" / "model.safetensors").is_file()
    for epoch in result["epochs"]:  # the three depths, each the chain formula over the conditional rates
        conditional = [epoch[f"val/cond_acc_{k}"] for k in range(5)]
        for depth in (3, 5):
            assert epoch[f"val/est_accept_len_d{depth}"] == pytest.approx(accept_length(conditional, depth))
        assert "val/est_accept_len_d7" not in epoch  # past the 5-step unroll
        assert "val/sim_accept_len_d7" not in epoch
        assert epoch["val/sim_accept_len"] == epoch["val/sim_accept_len_d5"]  # the unroll is depth 5
    # keep is no part of the run's definition: the finished run hands on its last epoch when asked
    last, sink = _run(cpu_train_params(target, data, output, keep="last", **values))
    assert (last["selected"], last["best"]["epoch"]) == (str(output / "epoch_3"), 1)
    assert _handed_on(sink) == [str(output / "epoch_3")]
