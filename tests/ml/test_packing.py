"""Sequence packing: samples packed into one row stay apart, train exactly as they do alone, and the train
stage runs with `pack` and reports how it packed. The drafter is testsupport/tiny_trainer.py's."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from contract.reasons import TerminationReason
from drafting.context import RecordingSink, StageContext, StageError
from drafting.ml.objective import Targets, ttt_objective
from drafting.ml.packing import RowLayout, epoch_packs, packing_report, row_layout
from drafting.ml.train_data import Batch, Collate, epoch_batches, run_steps, split_indices
from drafting.ml.trainer import Trainer
from drafting.stages import train
from testsupport.tiny_targets import cpu_train_params, successor_extraction
from testsupport.tiny_trainer import TTT, batch_of_one, random_sample, tiny_trainer

LENGTHS = (9, 6, 11)  # samples A, B, C of one packed row; a row of 32 leaves 6 positions of padding
ROW = 32


@pytest.fixture
def trainer() -> Trainer:
    return tiny_trainer("dense")


def _samples(seed: int = 0) -> list[dict[str, torch.Tensor]]:
    return [random_sample(n, seed * 10 + i) for i, n in enumerate(LENGTHS)]


def _packed_item(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """What HiddenStateDataset gives for a Pack: the samples back to back, with their lengths."""
    item = {key: torch.cat([s[key] for s in samples]) for key in samples[0]}
    item["sample_lengths"] = torch.tensor([s["input_ids"].shape[0] for s in samples])
    return item


def _packed(*rows: list[dict[str, torch.Tensor]]) -> Batch:
    return Collate(pad_multiple=ROW)([_packed_item(samples) for samples in rows])


def _spans() -> list[slice]:
    starts = [sum(LENGTHS[:i]) for i in range(len(LENGTHS))]
    return [slice(start, start + n) for start, n in zip(starts, LENGTHS, strict=True)]


def _only(samples: list[dict[str, torch.Tensor]], keep: int) -> list[dict[str, torch.Tensor]]:
    """The same samples, the loss counted in sample `keep` only."""
    return [
        s if i == keep else {**s, "loss_mask": torch.zeros_like(s["loss_mask"])}
        for i, s in enumerate(samples)
    ]


@torch.no_grad()
def _step_outputs(trainer: Trainer, batch: Batch, layout: RowLayout | None) -> list[torch.Tensor]:
    """Every TTT step's output for the batch's first row, [S, H] each, as the trainer feeds the drafter."""
    ids = torch.cat([batch.input_ids[:, 1:], batch.input_ids[:, :1] * 0], dim=1)
    aux = batch.hidden[:, :, :3].flatten(2)
    return [out[0] for out in trainer.drafter.forward_ttt(ids, aux, TTT, "dense", layout)]


@torch.no_grad()
def _stats(trainer: Trainer, batch: Batch, layout: RowLayout | None, tokens_after: Any) -> torch.Tensor:
    """The trainer's step statistics [5, K], with the drafter's layout and the objective's sample ends given
    apart, so a test can break one of them."""
    ids = torch.cat([batch.input_ids[:, 1:], batch.input_ids[:, :1] * 0], dim=1)
    outputs = trainer.drafter.forward_ttt(ids, batch.hidden[:, :, :3].flatten(2), TTT, "dense", layout)
    probs, argmax = trainer.head.distribution(batch.hidden[:, :, 3], trainer.draft_ids)
    targets = Targets(probs, argmax, trainer.in_draft_vocab[argmax], batch.loss_mask, tokens_after)
    return ttt_objective(trainer.drafter, outputs, targets, trainer.step_weights)[1].stacked()


def _changed_b(samples: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
    """Sample B's tokens, loss mask and hidden states replaced (same length)."""
    return [samples[0], random_sample(LENGTHS[1], seed=99), samples[2]]


# 1. Masks keep samples apart.


def test_changing_one_packed_sample_leaves_the_others_bit_for_bit(trainer: Trainer) -> None:
    samples = _samples()
    before, after = _packed(samples), _packed(_changed_b(samples))
    assert before.layout is not None
    outputs_before = _step_outputs(trainer, before, before.layout)
    outputs_after = _step_outputs(trainer, after, after.layout)
    a, b, c = _spans()
    for step in range(TTT):
        for span in (a, c):  # C comes after B: causal attention would reach B, were the mask wrong
            assert torch.equal(outputs_before[step][span], outputs_after[step][span]), (step, span)
        assert not torch.equal(outputs_before[step][b], outputs_after[step][b])  # B itself did change
    for keep in (0, 2):
        stats_before = _stats(
            trainer, _packed(_only(samples, keep)), before.layout, before.layout.tokens_after
        )
        changed = _only(_changed_b(samples), keep)
        assert torch.equal(
            stats_before, _stats(trainer, _packed(changed), after.layout, after.layout.tokens_after)
        )


@pytest.mark.parametrize("broken", ["full_causal_mask", "shift_into_next_sample"])
def test_the_isolation_check_fails_when_a_sample_boundary_is_crossed(trainer: Trainer, broken: str) -> None:
    """The check above, run on layouts broken on purpose: each way of crossing a sample boundary is caught."""
    samples = _samples()
    before, after = _packed(samples), _packed(_changed_b(samples))
    assert before.layout is not None
    layout = _broken(before.layout, broken)
    outputs_before = _step_outputs(trainer, before, layout)
    outputs_after = _step_outputs(trainer, after, layout)
    alone = [_step_outputs(trainer, batch_of_one(s), None) for s in samples]
    a, _b, c = _spans()
    caught = any(
        not torch.equal(outputs_before[k][span], outputs_after[k][span])
        or not torch.allclose(outputs_before[k][span], alone[i][k], rtol=1e-5, atol=1e-5)
        for k in range(TTT)
        for i, span in ((0, a), (2, c))
    )
    assert caught, broken


def _broken(layout: RowLayout, how: str) -> RowLayout:
    """(Rope positions that run on across samples are not in the list: rope is relative, so within a sample
    they change the scores by rounding only; restarting them keeps the numbers those of the sample alone.)"""
    if how == "full_causal_mask":  # one segment: plain causal attention over the whole row
        return layout._replace(segments=torch.zeros_like(layout.segments))
    return layout._replace(tokens_after=torch.full_like(layout.tokens_after, 10_000))  # shifts run on


def test_the_objective_without_sample_ends_would_score_the_next_samples_tokens(trainer: Trainer) -> None:
    samples = _samples()
    packed = _packed(samples)
    assert packed.layout is not None
    alone = sum(_stats(trainer, batch_of_one(s), None, None) for s in samples)
    crossing = _stats(trainer, packed, packed.layout, None)
    assert not torch.allclose(crossing, alone)  # counts of A's last positions against B's first tokens


# 2. Losses equal the unpacked run on the same data.


def test_a_packed_batch_gives_each_samples_own_statistics_at_every_ttt_step(trainer: Trainer) -> None:
    samples = _samples()
    alone = [trainer.evaluate([batch_of_one(s)]) for s in samples]
    assert all(stats[4].min() > 0 for stats in alone)  # every step counts positions in every sample
    assert sum(float(stats[2].sum()) for stats in alone) > 0  # and some of them are right
    torch.testing.assert_close(trainer.evaluate([_packed(samples)]), sum(alone), rtol=1e-6, atol=1e-5)
    for keep, own in enumerate(alone):  # per sample: loss sums, counts, accuracies and chains, per step
        torch.testing.assert_close(
            trainer.evaluate([_packed(_only(samples, keep))]), own, rtol=1e-6, atol=1e-5
        )


def test_a_packed_batch_walks_each_sample_as_its_own_decode(trainer: Trainer) -> None:
    """The simulated acceptance's cycles never run from one sample into the next."""
    samples, depths = _samples(), [1, 2, 3]
    alone = [trainer.validate([batch_of_one(s)], depths)[1] for s in samples]
    assert all(float(cycles[1].min()) > 0 for cycles in alone)  # every sample is decoded in some cycles
    torch.testing.assert_close(trainer.validate([_packed(samples)], depths)[1], sum(alone))


def test_every_position_of_every_step_equals_the_sample_run_alone(trainer: Trainer) -> None:
    samples = _samples()
    packed = _packed(samples)
    outputs = _step_outputs(trainer, packed, packed.layout)
    for sample, span in zip(samples, _spans(), strict=True):
        alone = _step_outputs(trainer, batch_of_one(sample), None)
        for step in range(TTT):
            torch.testing.assert_close(outputs[step][span], alone[step], rtol=1e-6, atol=1e-6)


def test_the_packed_loss_is_the_token_mean_of_the_unpacked_batch(trainer: Trainer) -> None:
    """A packed batch's loss is that of the same samples batched unpacked (padded to the longest)."""
    samples = _samples()
    unpacked = Collate()(samples)
    packed = _packed(samples)
    with torch.no_grad():
        loss_unpacked, _, _ = trainer._objective(trainer.unrolled, unpacked)
        loss_packed, _, _ = trainer._objective(trainer.unrolled, packed)
    torch.testing.assert_close(loss_packed, loss_unpacked, rtol=1e-6, atol=1e-6)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_the_flex_kernel_keeps_packed_samples_apart_as_the_dense_one() -> None:
    """FlexAttention (the GPU kernel) with the packed mask, two rows of different layouts: the same statistics
    as the dense kernel."""
    samples, others = _samples(0), [random_sample(n, 50 + n) for n in (12, 4, 7, 5)]
    batch = _packed(samples, others)
    dense, flex = tiny_trainer("dense"), tiny_trainer("flex")
    torch.testing.assert_close(flex.evaluate([batch]), dense.evaluate([batch]), rtol=1e-4, atol=1e-4)


# Planning the rows.


def test_each_epoch_packs_every_sample_once_into_rows_that_fit() -> None:
    rng = torch.Generator().manual_seed(0)
    seq_lens = torch.randint(1, 150, (300,), generator=rng).tolist()
    rows = list(range(0, 300, 3)) + list(range(1, 300, 3))
    plan = epoch_packs(rows, seq_lens, rows_per_batch=2, row_len=128, epoch=0, seed=7)
    packed = [sample for batch in plan for row in batch for sample in row]
    assert sorted(packed) == sorted(rows)
    assert all(sum(min(seq_lens[i], 128) for i in row) <= 128 for batch in plan for row in batch)
    assert plan == epoch_packs(rows, seq_lens, rows_per_batch=2, row_len=128, epoch=0, seed=7)  # resumable
    assert plan != epoch_packs(rows, seq_lens, rows_per_batch=2, row_len=128, epoch=1, seed=7)
    mine, theirs = (
        epoch_packs(rows, seq_lens, rows_per_batch=2, row_len=128, epoch=0, seed=7, rank=rank, world=2)
        for rank in (0, 1)
    )
    assert len(mine) == len(theirs)
    assert not {s for b in mine for r in b for s in r} & {s for b in theirs for r in b for s in r}
    steps = run_steps(3, rows, seq_lens, batch_size=2, seed=7, pack_len=128)
    assert steps == sum(len(epoch_packs(rows, seq_lens, rows_per_batch=2, row_len=128, epoch=e, seed=7))
                        for e in range(3))  # fmt: skip


def test_packing_short_samples_saves_the_padding_gpu_batches_round_up_to() -> None:
    seq_lens = [20 + (i * 37) % 90 for i in range(200)]  # 20..109 tokens; a GPU pads each row to 128
    rows = list(range(200))
    packed = epoch_packs(rows, seq_lens, rows_per_batch=1, row_len=1024, epoch=0, seed=0)
    unpacked = epoch_batches(rows, seq_lens, batch_size=1, epoch=0, seed=0)
    report = packing_report(packed, unpacked, seq_lens, row_len=1024, pad_multiple=128)
    assert report.samples == 200
    assert report.tokens == report.unpacked_tokens == sum(seq_lens)
    assert report.rows < 200 / 8  # about 15 samples of ~65 tokens per row of 1024
    assert report.padding_fraction < 0.05 < 0.3 < report.unpacked_padding_fraction
    metrics = report.metrics()
    assert metrics["pack/padding_saved"] == pytest.approx(
        report.unpacked_padding_fraction - report.padding_fraction
    )


def test_a_row_layout_restarts_positions_and_counts_what_is_left_of_each_sample() -> None:
    layout = row_layout([[3, 2]], 7)
    assert layout.segments.tolist() == [[0, 0, 0, 1, 1, 2, 2]]
    assert layout.positions.tolist() == [[0, 1, 2, 0, 1, 0, 1]]
    assert layout.tokens_after.tolist() == [[2, 1, 0, 1, 0, 1, 0]]


# 3. End to end through the train stage.


@pytest.fixture(scope="module")
def extraction(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("packing")
    return successor_extraction(root, conversations=12, turns=2, words=8, seed=3, max_len=96)


def test_the_train_stage_trains_packed_and_reports_the_packing(
    extraction: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, data = extraction
    values = {
        "epochs": 2, "ttt_steps": 3, "batch_size": 2, "max_len": 160, "pack": True, "lr": 1e-2,
        "warmup_steps": 0, "draft_vocab_size": 48, "val_fraction": 0.25,
    }  # fmt: skip
    params = cpu_train_params(target, data, tmp_path / "run", **values)
    sink = RecordingSink()
    result = train.run(StageContext(work_dir=tmp_path, sink=sink), params)

    assert result["completed"]
    assert result["global_step"] == result["total_steps"]
    assert (Path(result["checkpoint"]) / "model.safetensors").is_file()
    train_rows = len(split_indices(12, 0.25, 0)[0])
    for epoch in result["epochs"]:
        assert epoch["pack/samples"] == train_rows
        assert 1 <= epoch["pack/rows"] < train_rows  # several samples share a row
        assert 0 <= epoch["pack/padding_fraction"] < 1
        assert 0 <= epoch["pack/unpacked_padding_fraction"] < 1
        saved = epoch["pack/unpacked_padding_fraction"] - epoch["pack/padding_fraction"]
        assert epoch["pack/padding_saved"] == pytest.approx(saved)
        assert math.isfinite(epoch["val/loss"])
    steps = sum(math.ceil(e["pack/rows"] / 2) for e in result["epochs"])
    assert result["total_steps"] == steps  # two packed rows per step
    assert "samples packed into" in capsys.readouterr().out
    names = {e["name"] for e in sink.of_type("metric")}
    assert {"pack/rows", "pack/samples", "pack/padding_saved", "train/loss"} <= names

    unpacked = params.model_copy(update={"pack": False})
    with pytest.raises(StageError) as refused:  # the run's batches were packed: it cannot continue unpacked
        train.run(StageContext(work_dir=tmp_path, sink=RecordingSink()), unpacked)
    assert refused.value.reason == TerminationReason.DATA_MISMATCH
    assert "pack" in str(refused.value)


def test_two_ranks_train_packed_rows_under_ddp(extraction: tuple[Path, Path], tmp_path: Path) -> None:
    """torchrun + DDP (gloo) carries the packed rows' layout through the drafter's forward; the packing report
    sums the ranks' rows (each rank one row a step)."""
    target, data = extraction
    values = {
        "epochs": 1, "ttt_steps": 2, "batch_size": 1, "max_len": 96, "pack": True, "ranks": 2,
        "draft_vocab_size": 48, "val_fraction": 0.25,
    }  # fmt: skip
    params = cpu_train_params(target, data, tmp_path / "run", **values)
    result = train.run(StageContext(work_dir=tmp_path / "work", sink=RecordingSink()), params)
    assert result["completed"]
    (epoch,) = result["epochs"]
    assert epoch["pack/rows"] == 2 * result["global_step"]
    assert epoch["pack/samples"] > epoch["pack/rows"]
    assert math.isfinite(epoch["val/loss"])
