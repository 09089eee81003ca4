"""One optimizer step of EAGLE-3 TTT training, and validation, on any device.

The target side is frozen and cheap: the stored last hidden states go through the target's final norm and
lm_head (full vocab, chunked) to give the soft targets; the drafter runs `ttt_steps` passes and the objective
compares each with the target. Master weights stay float32; on a GPU the passes run under bf16 autocast.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from drafting.ml._attention import AttentionBackend
from drafting.ml.argmax_cache import ArgmaxCache
from drafting.ml.distributed import Ranks, max_across, sum_across
from drafting.ml.drafter import Eagle3Drafter
from drafting.ml.objective import Targets, ttt_objective
from drafting.ml.packing import RowLayout
from drafting.ml.simulated_acceptance import WALK_ROWS, walk
from drafting.ml.target_head import TargetHead
from drafting.ml.train_data import Batch

Schedule = Literal["cosine", "linear", "constant"]
# The drafter's compiler: a name or a callable, as torch.compile takes it (tests swap in a failing one).
COMPILE_BACKEND: Any = "inductor"
# One graph per padded length (max_len / pad multiple), for training and for no-grad validation, and for a
# short last batch: dynamo's default of 8 would send the longer lengths of a run to eager.
RECOMPILE_LIMIT = 64


def _allow_recompiles(limit: int) -> None:
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), limit))


class NonFiniteLoss(Exception):
    """The loss, or the gradient norm of a finite loss, is not finite: raised before the weights change."""

    def __init__(self, step: int, value: float, what: str = "loss") -> None:
        super().__init__(f"{what} is {value} at step {step}")
        self.step = step


class StepOutOfMemory(Exception):
    def __init__(self, batch_size: int, seq_len: int) -> None:
        super().__init__(f"out of memory on a batch of {batch_size} x {seq_len} tokens")
        self.batch_size = batch_size
        self.seq_len = seq_len


class StopRequested(Exception):
    """A rank was asked to stop (cancel): every rank stops before the same step, none half-way through."""


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


class _Unrolled(nn.Module):
    """The TTT unroll and its objective as one module: DDP then sees every trainable weight used inside
    its forward (the objective reads lm_head), and its gradient hooks all-reduce them during backward."""

    _compiled: Callable[..., list[torch.Tensor]] | None

    def __init__(
        self,
        drafter: Eagle3Drafter,
        ttt_steps: int,
        step_weights: list[float],
        attention: AttentionBackend,
        *,
        compiled: bool,
    ) -> None:
        super().__init__()
        self.drafter = drafter
        self.ttt_steps, self.step_weights, self.attention = ttt_steps, step_weights, attention
        # Kept off the module tree (object.__setattr__): the compiled wrapper shares the drafter's weights,
        # and registering it would list them twice for DDP and the optimizer. Static shapes: batches are
        # padded to a few lengths, each compiled once; dynamo's automatic dynamic shapes lowered
        # FlexAttention with a symbolic length that torch 2.11's Inductor could not compile
        # (docs/design/compile-threshold.md).
        if compiled:
            _allow_recompiles(RECOMPILE_LIMIT)
            drafter.rotary.prepare(drafter.fc.weight.device)
        unroll = torch.compile(drafter, backend=COMPILE_BACKEND, dynamic=False) if compiled else None
        object.__setattr__(self, "_compiled", unroll)

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def run_eagerly(self) -> None:
        object.__setattr__(self, "_compiled", None)

    def forward(
        self,
        drafter_ids: torch.Tensor,
        aux: torch.Tensor,
        probs: torch.Tensor,
        argmax: torch.Tensor,
        in_draft: torch.Tensor,
        loss_mask: torch.Tensor,
        layout: RowLayout | None = None,
        with_walk: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        unroll = self._compiled if self._compiled is not None else self.drafter
        outputs = unroll(drafter_ids, aux, self.ttt_steps, self.attention, layout)
        tokens_after = layout.tokens_after if layout is not None else None
        targets = Targets(probs, argmax, in_draft, loss_mask, tokens_after)
        loss, stats = ttt_objective(self.drafter, outputs, targets, self.step_weights, with_walk=with_walk)
        walked = (
            stats.walk if stats.walk is not None else drafter_ids.new_zeros(WALK_ROWS, len(drafter_ids), 0)
        )
        return loss, stats.stacked(), walked


class Trainer:
    """Optimizer steps on one rank. With several ranks (torchrun) the drafter trains under DDP: each rank
    takes its own batches, gradients are averaged during backward, and every step starts with one small
    all-reduce so that all ranks agree on the loss, a stop request and an out-of-memory before anyone
    runs backward (a rank that left alone would hang the others in the next collective)."""

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
        ranks: Ranks | None = None,
        compile_drafter: bool = False,
    ) -> None:
        self.drafter, self.head = drafter, head
        self.optimizer, self.scheduler, self.settings = optimizer, scheduler, settings
        self.ttt_steps, self.device = ttt_steps, device
        self.ranks = ranks or Ranks()
        self.step_weights = [step_decay**k for k in range(ttt_steps)]
        self.autocast = compute_dtype != torch.float32
        self.compute_dtype = compute_dtype
        self.draft_ids = drafter.draft_to_target(torch.arange(drafter.d2t.numel(), device=device))
        self.in_draft_vocab = drafter.t2d
        self.argmax_cache = ArgmaxCache()
        self.draft_rows = head.lm_head[
            self.draft_ids
        ]  # [Vd, T]: the head of every step after a sample's first
        self.unrolled = _Unrolled(drafter, ttt_steps, self.step_weights, attention, compiled=compile_drafter)
        self.compile_fallback: dict[str, Any] | None = None
        self.trained: nn.Module = self.unrolled
        if self.ranks.distributed:
            self.trained = DistributedDataParallel(
                self.unrolled,
                device_ids=[device.index] if device.type == "cuda" else None,
                gradient_as_bucket_view=True,
                **_NO_BUFFER_SYNC,
            )

    def _objective(
        self, model: nn.Module, batch: Batch, *, with_walk: bool = False, training: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        aux = batch.hidden[:, :, :3].flatten(2)
        probs, argmax = self._targets(batch, cached=training)
        drafter_ids = torch.cat([batch.input_ids[:, 1:], batch.input_ids[:, :1] * 0], dim=1)
        with torch.autocast(self.device.type, dtype=self.compute_dtype, enabled=self.autocast):
            in_draft = self.in_draft_vocab[argmax]
            loss, stats, walked = model(
                drafter_ids, aux, probs, argmax, in_draft, batch.loss_mask, batch.layout, with_walk
            )
        return loss, stats, walked

    def _targets(self, batch: Batch, *, cached: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The target's draft-vocab probabilities and full-vocab argmax. Training samples keep their argmax
        after their first step (argmax_cache.py); validation rows are numbered in another extraction, so
        they are never looked up."""
        last = batch.hidden[:, :, 3]
        argmax = self.argmax_cache.lookup(batch) if cached else None
        if argmax is not None:
            return self.head.draft_distribution(last, self.draft_rows), argmax
        probs, argmax = self.head.distribution(last, self.draft_ids)
        if cached:
            self.argmax_cache.store(batch, argmax)
        return probs, argmax

    def step(
        self, batch: Batch, global_step: int, *, stop_requested: bool = False
    ) -> tuple[float, float, torch.Tensor]:
        """One optimizer step: (loss averaged over ranks, grad norm before clipping, this rank's step stats
        [5, K]). Raises StopRequested, NonFiniteLoss or StepOutOfMemory on every rank alike.

        The host waits on the GPU once, after the gradients and before the weights change: that is where a
        non-finite loss or gradient is stopped. Waiting twice (for the loss between forward and backward,
        and for the grad norm after the optimizer) left an H200 idle ~5 ms of a 131 ms step at the 8B shape;
        once, 2.7 ms (docs/design/training-step.md). Under DDP the ranks also agree before backward, which
        all-reduces: a rank whose forward ran out of memory cannot join it, and the others would wait for it
        forever."""
        if stop_requested and not self.ranks.distributed:
            raise StopRequested()
        self.drafter.train()
        loss = stats = None
        try:
            loss, stats, _ = self._objective_or_eager(
                self.trained, batch, global_step + 1, "forward", training=True
            )
        except torch.OutOfMemoryError:
            if not self.ranks.distributed:
                raise self._out_of_memory(batch, True) from None
        if self.ranks.distributed:
            self._agree_before_backward(batch, loss, stop_requested)
        assert loss is not None
        assert stats is not None
        try:
            self._backward(loss, batch, global_step)
            params = [p for p in self.drafter.parameters() if p.grad is not None]
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.settings.grad_clip)
        except torch.OutOfMemoryError:
            # Past the agreement point: this rank fails alone; torchrun then ends the others.
            raise StepOutOfMemory(*batch.input_ids.shape) from None
        # The grad norm is the same on every rank (DDP's gradients are all-reduced), so its mean is itself.
        local = torch.stack([loss.detach().float(), grad_norm.detach().float().to(loss.device)])
        value, norm = (sum_across(self.ranks, local) / self.ranks.world).tolist()  # the one wait
        if not math.isfinite(value):
            raise NonFiniteLoss(global_step, value)
        if not math.isfinite(norm):
            raise NonFiniteLoss(global_step, norm, what="gradient norm")
        try:
            self.optimizer.step()
        except torch.OutOfMemoryError:
            raise StepOutOfMemory(*batch.input_ids.shape) from None
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return value, norm, stats

    def _agree_before_backward(self, batch: Batch, loss: torch.Tensor | None, stop_requested: bool) -> None:
        """DDP: every rank learns whether any ran out of memory in forward, or was asked to stop, and then
        all raise alike (a sync between forward and backward, paid only with several ranks)."""
        out_of_memory = loss is None
        local = torch.tensor([float(stop_requested), float(out_of_memory)], device=self.device)
        verdict = sum_across(self.ranks, local).tolist()
        if verdict[1] > 0:
            raise self._out_of_memory(batch, out_of_memory)
        if verdict[0] > 0:
            raise StopRequested()

    def _objective_or_eager(
        self,
        model: nn.Module,
        batch: Batch,
        step: int,
        phase: str,
        *,
        with_walk: bool = False,
        training: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`_objective`; a compiled one that fails (a compiler bug, at the first shape, at a later one's
        recompile, or in validation's no-grad graphs) falls back to eager for the rest of the run: slower,
        never wrong, and an error that is not the compiler's recurs eagerly and propagates."""
        try:
            return self._objective(model, batch, with_walk=with_walk, training=training)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            if not self.unrolled.compiled:
                raise
            self._run_eagerly(exc, step, phase)
            return self._objective(model, batch, with_walk=with_walk, training=training)

    def _backward(self, loss: torch.Tensor, batch: Batch, global_step: int) -> None:
        """loss.backward(); the compiled graph's backward is compiled at its first use, so it can fail there
        too. On one rank the step is then redone eagerly from zeroed gradients; under DDP a half-run backward
        cannot be redone, and the error propagates."""
        try:
            loss.backward()
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            if not self.unrolled.compiled or self.ranks.distributed:
                raise
            self._run_eagerly(exc, global_step + 1, "backward")
            self.optimizer.zero_grad(set_to_none=True)
            self._objective(self.trained, batch, training=True)[0].backward()

    def _run_eagerly(self, exc: Exception, global_step: int, phase: str) -> None:
        reason = _one_line(exc)
        if exc.__cause__ is not None:  # dynamo wraps the compiler's own error
            reason += f" (caused by {_one_line(exc.__cause__)})"
        self.compile_fallback = {"step": global_step, "phase": phase, "error": reason}
        warnings.warn(
            f"torch.compile of the drafter failed (step {global_step}, {phase}), training eagerly: {reason}",
            stacklevel=3,
        )
        self.unrolled.run_eagerly()

    def _out_of_memory(self, batch: Batch, here: bool) -> StepOutOfMemory:
        """The failing batch's shape on every rank (the largest, when several ranks ran out)."""
        shape = torch.tensor(batch.input_ids.shape if here else (0, 0), device=self.device)
        batch_size, seq_len = max_across(self.ranks, shape).tolist()
        return StepOutOfMemory(int(batch_size), int(seq_len))

    def evaluate(self, batches: Iterable[Batch]) -> torch.Tensor:
        """Step stats summed over this rank's batches and then over all ranks ([5, K], zeros if none)."""
        return self.validate(batches, ())[0]

    @torch.no_grad()
    def validate(self, batches: Iterable[Batch], depths: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """`evaluate`'s step stats, and the simulated acceptance's (tokens, cycles) sums per depth of
        `depths` ([2, D], simulated_acceptance.walk), both summed over this rank's batches and all ranks."""
        self.drafter.eval()
        total = torch.zeros(5, self.ttt_steps, device=self.device)
        cycles = torch.zeros(2, len(depths), dtype=torch.float64)
        for batch in batches:
            _, stats, walked = self._objective_or_eager(
                self.unrolled,
                batch.to(self.device),
                self.scheduler.last_epoch,
                "validation",
                with_walk=bool(depths),
            )
            total += stats
            if depths:
                cycles += walk(walked, depths)
        return sum_across(self.ranks, total), sum_across(self.ranks, cycles.to(self.device))


# d2t is the same on every rank and never changes: no buffer broadcast before each forward. torch 2.13
# renamed the switch (and warns on the old name); GPU hosts may run an older torch.
_NO_BUFFER_SYNC: dict[str, Any] = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else {"broadcast_buffers": False}
)


def _one_line(exc: BaseException, limit: int = 240) -> str:
    """An error as one short line: Inductor's messages carry whole IR dumps."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:limit]
