"""The epoch loop: batches, metrics, validation, per-epoch checkpoints, and stopping cleanly.

It talks to its surroundings through `Reporter` (the stage context satisfies it) and `Checkpointer`, so it
knows nothing of jobs, and a cancel or a `max_steps` stop always leaves a state file the run resumes from.
Within an epoch the state is also saved every `state_every_s` seconds, so a crash (a killed worker, a lost
host) costs at most that much training, not the epoch.
Under torchrun every rank runs this loop in lockstep over its own share of the batches; statistics are
summed over the ranks before they are reported, so the figures describe the whole global batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from drafting.ml.distributed import sum_across
from drafting.ml.objective import ACCEPT_DEPTHS, summarise
from drafting.ml.packing import Pack, PackingReport, epoch_packs, packing_report
from drafting.ml.simulated_acceptance import accept_lengths
from drafting.ml.train_data import EpochPlan, HiddenStateDataset, batch_loader, epoch_batches
from drafting.ml.train_state import RunPosition
from drafting.ml.trainer import StopRequested, Trainer


class Reporter(Protocol):
    def log(self, text: str, *, stream: str = "stdout") -> None: ...

    def progress(self, fraction: float, message: str = "") -> None: ...

    def metric(self, name: str, value: float, step: int) -> None: ...

    def cancel_requested(self) -> bool: ...


@dataclass(frozen=True)
class ValidationSet:
    """Samples validated after every epoch; their metrics are reported as `{name}/...`."""

    name: str  # "val": the split of the training data; "held_out": an extraction of prompts kept out
    dataset: HiddenStateDataset
    rows: list[int]


@dataclass
class LoopPlan:
    dataset: HiddenStateDataset
    train_rows: list[int]
    val_rows: list[int]
    seq_lens: list[int]
    epochs: int
    batch_size: int
    seed: int
    log_every: int
    max_steps: int | None
    state_every_s: float | None
    loader_workers: int
    pad_multiple: int
    total_steps: int
    # depths the acceptance-length estimate is reported at (est_accept_len_d{d}), the selection's among them
    accept_depths: tuple[int, ...] = ACCEPT_DEPTHS
    # sequence packing: rows of up to this many tokens, several samples each (None: one sample per row)
    pack_len: int | None = None
    # an extraction of prompts kept out of training, validated beside the split (held_out/... metrics)
    held_out: ValidationSet | None = None

    def validation_sets(self) -> list[ValidationSet]:
        """What is validated after every epoch: the split (when there is one), then the held-out set."""
        split = [ValidationSet("val", self.dataset, self.val_rows)] if self.val_rows else []
        return split + ([self.held_out] if self.held_out is not None else [])

    def unpacked_batches(self, epoch: int, rank: int, world: int) -> list[list[int]]:
        """This rank's batches of an epoch, one sample per row."""
        return epoch_batches(
            self.train_rows,
            self.seq_lens,
            batch_size=self.batch_size,
            epoch=epoch,
            seed=self.seed,
            rank=rank,
            world=world,
        )

    def packed_batches(self, epoch: int, rank: int, world: int, row_len: int) -> list[list[Pack]]:
        """This rank's batches of an epoch, `batch_size` packed rows each."""
        return epoch_packs(
            self.train_rows,
            self.seq_lens,
            rows_per_batch=self.batch_size,
            row_len=row_len,
            epoch=epoch,
            seed=self.seed,
            rank=rank,
            world=world,
        )


@dataclass
class _Window:
    """Training statistics since the last report."""

    stats: torch.Tensor | None = None
    tokens: int = 0
    loss: float = 0.0
    grad_norm: float = 0.0
    steps: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, loss: float, grad_norm: float, stats: torch.Tensor, tokens: int) -> None:
        self.stats = stats if self.stats is None else self.stats + stats
        self.loss, self.grad_norm = self.loss + loss, self.grad_norm + grad_norm
        self.tokens, self.steps = self.tokens + tokens, self.steps + 1


Checkpointer = Callable[[RunPosition], None]
EpochSaver = Callable[[int, dict[str, float]], Path]


def run_training(
    trainer: Trainer,
    plan: LoopPlan,
    position: RunPosition,
    reporter: Reporter,
    *,
    save_state: Checkpointer,
    save_epoch: EpochSaver,
) -> list[dict[str, float]]:
    """Train from `position` to the end (or max_steps); returns per-epoch summaries of this call."""
    summaries = []
    while position.epoch < plan.epochs:
        batches, packing = _plan_epoch(trainer, plan, position, reporter)
        finished_epoch, epoch_stats = _train_epoch(trainer, plan, batches, position, reporter, save_state)
        if not finished_epoch:
            break
        summary = {**_end_of_epoch(trainer, plan, position, reporter, epoch_stats), **packing}
        save_epoch(position.epoch, summary)
        position.epoch, position.batch_in_epoch = position.epoch + 1, 0
        save_state(position)
        summaries.append(summary)
    return summaries


def _plan_epoch(
    trainer: Trainer, plan: LoopPlan, position: RunPosition, reporter: Reporter
) -> tuple[EpochPlan, dict[str, float]]:
    """This rank's batches of the epoch, and with packing how they pack (for the epoch's summary)."""
    rank, world = trainer.ranks.rank, trainer.ranks.world
    if plan.pack_len is None:
        return plan.unpacked_batches(position.epoch, rank, world), {}
    packed = plan.packed_batches(position.epoch, rank, world, plan.pack_len)
    report = packing_report(
        packed,
        plan.unpacked_batches(position.epoch, rank, world),
        plan.seq_lens,
        row_len=plan.pack_len,
        pad_multiple=plan.pad_multiple,
    )
    return packed, _report_packing(trainer, plan, report, position, reporter)


def _report_packing(
    trainer: Trainer, plan: LoopPlan, report: PackingReport, position: RunPosition, reporter: Reporter
) -> dict[str, float]:
    """This rank's report summed over the ranks, as metrics and a log line; returns the metrics."""
    counts = [float(n) for n in astuple(report)]
    totals = sum_across(trainer.ranks, torch.tensor(counts, dtype=torch.float64, device=trainer.device))
    report = PackingReport(*(round(n) for n in totals.tolist()))
    metrics = report.metrics()
    for name, value in metrics.items():
        reporter.metric(name, value, position.global_step)
    reporter.log(
        f"epoch {position.epoch + 1}: {report.samples} samples packed into {report.rows} rows of up to "
        f"{plan.pack_len} tokens; padding {report.padding_fraction:.1%} of positions "
        f"(unpacked batches: {report.unpacked_padding_fraction:.1%})"
    )
    return metrics


def _train_epoch(
    trainer: Trainer,
    plan: LoopPlan,
    batches: EpochPlan,
    position: RunPosition,
    reporter: Reporter,
    save_state: Checkpointer,
) -> tuple[bool, torch.Tensor | None]:
    """Train the rest of the current epoch (`batches`: all of its batches for this rank): (whether it
    finished, this rank's summed step stats). An early stop (max_steps, cancel: StopRequested) saves the
    state first."""
    loader = batch_loader(
        plan.dataset,
        batches[position.batch_in_epoch :],
        workers=plan.loader_workers,
        pin_memory=trainer.device.type == "cuda",
        pad_multiple=plan.pad_multiple,
    )
    window, epoch_stats = _Window(), None
    last_saved = time.monotonic()
    for batch in loader:
        try:
            loss, grad_norm, stats = trainer.step(
                batch.to(trainer.device), position.global_step, stop_requested=reporter.cancel_requested()
            )
        except StopRequested:
            save_state(position)  # the steps done so far survive the cancel
            raise
        position.global_step += 1
        position.batch_in_epoch += 1
        window.add(loss, grad_norm, stats, batch.tokens)
        epoch_stats = stats if epoch_stats is None else epoch_stats + stats
        if position.global_step % plan.log_every == 0:
            _report_window(trainer, plan, position, reporter, window)
            window = _Window()
        if plan.state_every_s is not None and time.monotonic() - last_saved >= plan.state_every_s:
            save_state(position)
            last_saved = time.monotonic()
        if plan.max_steps is not None and position.global_step >= plan.max_steps:
            save_state(position)
            reporter.log(f"stopping at max_steps={plan.max_steps}")
            return False, epoch_stats
    return True, epoch_stats


def _report_window(
    trainer: Trainer, plan: LoopPlan, position: RunPosition, reporter: Reporter, window: _Window
) -> None:
    assert window.stats is not None
    step = position.global_step
    elapsed = max(time.monotonic() - window.started, 1e-9)
    tokens = torch.tensor([float(window.tokens)], dtype=torch.float64, device=window.stats.device)
    totals = sum_across(trainer.ranks, torch.cat([window.stats.double().flatten(), tokens]))
    metrics = summarise(totals[:-1].view_as(window.stats), trainer.step_weights, plan.accept_depths)
    metrics.update(
        loss=window.loss / window.steps,
        grad_norm=window.grad_norm / window.steps,
        lr=float(trainer.scheduler.get_last_lr()[0]),
        tokens_per_s=float(totals[-1]) / elapsed,
    )
    for name, value in metrics.items():
        reporter.metric(f"train/{name}", value, step)
    fraction = step / max(plan.total_steps, 1)
    eta = elapsed / window.steps * (plan.total_steps - step)
    reporter.progress(
        fraction, f"epoch {position.epoch + 1}/{plan.epochs} step {step}/{plan.total_steps}, eta {eta:.0f}s"
    )
    reporter.log(
        f"step {step} loss {metrics['loss']:.4f} acc_0 {metrics['acc_0']:.3f} "
        f"tau {metrics['est_accept_len']:.2f} lr {metrics['lr']:.2e} {metrics['tokens_per_s']:,.0f} tok/s"
    )


def _end_of_epoch(
    trainer: Trainer,
    plan: LoopPlan,
    position: RunPosition,
    reporter: Reporter,
    epoch_stats: torch.Tensor | None,
) -> dict[str, float]:
    """Epoch metrics: the epoch's training statistics (train_epoch/...) and validation (val/... on the split,
    held_out/... on the held-out extraction).

    After a resume mid-epoch, train_epoch/ covers the part of the epoch this run trained."""
    summary: dict[str, float] = {"epoch": float(position.epoch + 1)}
    reporter.metric("epoch", position.epoch + 1, position.global_step)
    if epoch_stats is not None:  # the same on every rank: all ran the same number of steps
        epoch_stats = sum_across(trainer.ranks, epoch_stats)
        for name, value in summarise(epoch_stats, trainer.step_weights, plan.accept_depths).items():
            reporter.metric(f"train_epoch/{name}", value, position.global_step)
            summary[f"train_epoch/{name}"] = value
    for validation in plan.validation_sets():
        summary.update(_validate(trainer, plan, validation, position, reporter))
    return summary


def _validate(
    trainer: Trainer, plan: LoopPlan, validation: ValidationSet, position: RunPosition, reporter: Reporter
) -> dict[str, float]:
    """Metrics on a validation set, reported as `{name}/...` and returned under those names. Each rank takes
    every world-th batch; the sums are added up over the ranks."""
    rows, size = validation.rows, plan.batch_size
    batches = [rows[i : i + size] for i in range(0, len(rows), size)]
    ranks = trainer.ranks
    mine = batches[ranks.rank :: ranks.world]
    loader = batch_loader(
        validation.dataset, mine, workers=0, pin_memory=False, pad_multiple=plan.pad_multiple
    )
    # the estimate's depths the unroll reaches, and the unroll itself (sim_accept_len, as est_accept_len)
    unroll = trainer.ttt_steps
    depths = sorted({d for d in plan.accept_depths if d <= unroll} | {unroll})
    sums, cycles = trainer.validate(loader, depths)
    prefix = validation.name
    metrics: dict[str, float] = {}
    named = summarise(sums, trainer.step_weights, plan.accept_depths)
    for depth, value in accept_lengths(cycles.cpu(), depths).items():
        if depth in plan.accept_depths:
            named[f"sim_accept_len_d{depth}"] = value
        if depth == unroll:
            named["sim_accept_len"] = value
    for name, value in named.items():
        reporter.metric(f"{prefix}/{name}", value, position.global_step)
        metrics[f"{prefix}/{name}"] = value
    reporter.log(
        f"epoch {position.epoch + 1}: {prefix} loss {metrics[f'{prefix}/loss']:.4f} "
        f"acc_0 {metrics[f'{prefix}/acc_0']:.3f} "
        f"simulated acceptance length {metrics.get(f'{prefix}/sim_accept_len', float('nan')):.2f} "
        f"(per-position estimate {metrics[f'{prefix}/est_accept_len']:.2f})"
    )
    return metrics
