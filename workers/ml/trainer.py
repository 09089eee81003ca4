"""One optimizer step of EAGLE-3 TTT training, and validation, on any device.

The target side is frozen and cheap: the stored last hidden states go through the target's final norm and
lm_head (full vocab, chunked) to give the soft targets; the drafter runs `ttt_steps` passes and the objective
compares each with the target. Master weights stay float32; on a GPU the passes run under bf16 autocast.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch

from workers.ml._attention import AttentionBackend
from workers.ml.drafter import Eagle3Drafter
from workers.ml.objective import Targets, ttt_objective
from workers.ml.target_head import TargetHead
from workers.ml.train_data import Batch

Schedule = Literal["cosine", "linear", "constant"]


class NonFiniteLoss(Exception):
    def __init__(self, step: int, value: float) -> None:
        super().__init__(f"loss is {value} at step {step}")
        self.step = step


class StepOutOfMemory(Exception):
    def __init__(self, batch_size: int, seq_len: int) -> None:
        super().__init__(f"out of memory on a batch of {batch_size} x {seq_len} tokens")
        self.batch_size = batch_size
        self.seq_len = seq_len


@dataclass(frozen=True)
class OptimSettings:
    lr: float
    warmup_steps: int
    total_steps: int
    schedule: Schedule
    weight_decay: float
    grad_clip: float


def lr_factor(step: int, settings: OptimSettings) -> float:
    """Linear warmup from ~0, then cosine or linear decay to 0 at total_steps (or constant)."""
    if step < settings.warmup_steps:
        return (step + 1) / (settings.warmup_steps + 1)
    if settings.schedule == "constant":
        return 1.0
    span = max(settings.total_steps - settings.warmup_steps, 1)
    progress = min((step - settings.warmup_steps) / span, 1.0)
    if settings.schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(
    drafter: Eagle3Drafter, settings: OptimSettings, device: torch.device
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (betas 0.9/0.95 as EAGLE and SpecForge) over the trainable weights, with its LR schedule."""
    params = [p for p in drafter.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=settings.lr,
        betas=(0.9, 0.95),
        weight_decay=settings.weight_decay,
        fused=device.type == "cuda",
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, settings))
    return optimizer, scheduler


class Trainer:
    def __init__(
        self,
        drafter: Eagle3Drafter,
        head: TargetHead,
        *,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        settings: OptimSettings,
        ttt_steps: int,
        step_decay: float,
        attention: AttentionBackend,
        compute_dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.drafter, self.head = drafter, head
        self.optimizer, self.scheduler, self.settings = optimizer, scheduler, settings
        self.ttt_steps, self.attention, self.device = ttt_steps, attention, device
        self.step_weights = [step_decay**k for k in range(ttt_steps)]
        self.autocast = compute_dtype != torch.float32
        self.compute_dtype = compute_dtype
        self.draft_ids = drafter.draft_to_target(torch.arange(drafter.d2t.numel(), device=device))
        self.in_draft_vocab = drafter.t2d

    def _objective(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        aux = batch.hidden[:, :, :3].flatten(2)
        probs, argmax = self.head.distribution(batch.hidden[:, :, 3], self.draft_ids)
        targets = Targets(probs, argmax, self.in_draft_vocab[argmax], batch.loss_mask)
        drafter_ids = torch.cat([batch.input_ids[:, 1:], batch.input_ids[:, :1] * 0], dim=1)
        with torch.autocast(self.device.type, dtype=self.compute_dtype, enabled=self.autocast):
            outputs = self.drafter(drafter_ids, aux, self.ttt_steps, self.attention)
            loss, stats = ttt_objective(self.drafter, outputs, targets, self.step_weights)
        return loss, stats.stacked()

    def step(self, batch: Batch, global_step: int) -> tuple[float, float, torch.Tensor]:
        """One optimizer step: (loss, grad norm before clipping, step stats [5, K])."""
        self.drafter.train()
        try:
            loss, stats = self._objective(batch)
            value = float(
                loss.detach()
            )  # the one sync per step: needed to stop before a NaN reaches the weights
            if not math.isfinite(value):
                raise NonFiniteLoss(global_step, value)
            loss.backward()
        except torch.OutOfMemoryError:
            raise StepOutOfMemory(*batch.input_ids.shape) from None
        params = [p for p in self.drafter.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.settings.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return value, float(grad_norm), stats

    @torch.no_grad()
    def evaluate(self, batches: Iterable[Batch]) -> torch.Tensor | None:
        """Summed step stats over the batches (None when there are none)."""
        self.drafter.eval()
        total: torch.Tensor | None = None
        for batch in batches:
            _, stats = self._objective(batch.to(self.device))
            total = stats if total is None else total + stats
        return total
