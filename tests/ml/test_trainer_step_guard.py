"""`Trainer.step` waits on the device once, after the gradients, and stops a non-finite loss or gradient
there, before any weight changes. A gradient that overflows while the loss stays finite used to reach the
weights: the grad norm was read only after the optimizer had stepped. The drafter is tiny and built from a
config (testsupport/tiny_trainer.py)."""

from __future__ import annotations

import math

import pytest
import torch

from drafting.ml.trainer import NonFiniteLoss, Trainer
from testsupport.tiny_trainer import batch_of_one, random_sample, tiny_trainer


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.drafter.named_parameters() if p.requires_grad}


def _unchanged(trainer: Trainer, before: dict[str, torch.Tensor]) -> bool:
    return all(
        torch.equal(before[name], p) for name, p in trainer.drafter.named_parameters() if name in before
    )


def test_a_finite_step_returns_the_loss_and_the_norm_and_moves_the_weights() -> None:
    trainer = tiny_trainer("dense")
    before = _weights(trainer)
    loss, grad_norm, stats = trainer.step(batch_of_one(random_sample(12, 0)), 0)
    assert math.isfinite(loss)
    assert loss > 0
    assert math.isfinite(grad_norm)
    assert grad_norm > 0
    assert stats.shape[1] == trainer.ttt_steps
    assert not _unchanged(trainer, before)
    assert trainer.scheduler.last_epoch == 1


def test_an_overflowing_gradient_with_a_finite_loss_stops_before_the_weights_change() -> None:
    trainer = tiny_trainer("dense")
    # the optimizer has state after one step: a later step would change it
    trainer.step(batch_of_one(random_sample(12, 0)), 0)
    before = _weights(trainer)
    state_before = {k: v.clone() for k, v in trainer.optimizer.state[trainer.drafter.fc.weight].items()}
    hook = trainer.drafter.fc.weight.register_hook(lambda grad: grad * float("inf"))
    try:
        with pytest.raises(NonFiniteLoss, match=r"gradient norm is (inf|nan) at step 1") as caught:
            trainer.step(batch_of_one(random_sample(12, 1)), 1)
    finally:
        hook.remove()
    assert caught.value.step == 1
    assert _unchanged(trainer, before)
    after = trainer.optimizer.state[trainer.drafter.fc.weight]
    assert all(torch.equal(state_before[k], after[k]) for k in state_before)
    assert trainer.scheduler.last_epoch == 1  # the schedule did not advance for the refused step


def test_a_non_finite_loss_stops_before_the_weights_change() -> None:
    trainer = tiny_trainer("dense")
    before = _weights(trainer)
    sample = random_sample(12, 0)
    sample["hidden"][:, :3] = float("nan")
    with pytest.raises(NonFiniteLoss, match=r"loss is nan at step 0"):
        trainer.step(batch_of_one(sample), 0)
    assert _unchanged(trainer, before)
