"""The TTT training objective: soft cross-entropy against the target at every unrolled step, and the
per-position accuracies the acceptance-length estimate is built from.

Alignment (token t_i at position i, target state a_i after reading t_0..t_i):

* the drafter's step-0 input at position j is (t_{j+1}, a_j) and step k's is (t_{j+1+k}, its own step k-1
  output at j); step k predicts t_{j+2+k},
* its target is the target model's distribution at position j+1+k (restricted and renormalised to the draft
  vocab, as EAGLE and SpecForge do), and
* it counts where t_{j+2+k} is an assistant token (loss mask) - positions whose target argmax lies outside the
  draft vocab are left out of the loss, but count as misses in the accuracies.

Accuracies: `acc_k` is the teacher-forced per-step accuracy (the prefix fed is the data's, so it estimates the
conditional rate c_k); `full_acc_k` counts base positions where steps 0..k were *all* right (f_k, cumulative).
The acceptance-length estimate is tau = 1 + sum_k f_k: for a greedy chain of K drafts, the expected number of
tokens per verify step is the bonus token plus P(first k+1 drafts accepted) summed over k.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from drafting.ml._compiled import CompiledOnCuda
from drafting.ml.drafter import Eagle3Drafter


@dataclass
class Targets:
    probs: torch.Tensor  # [B, S, Vd] target distribution at each position over the draft vocab
    argmax: torch.Tensor  # [B, S] target's full-vocab argmax at each position
    in_draft: torch.Tensor  # [B, S] whether that argmax is in the draft vocab
    loss_mask: torch.Tensor  # [B, S] whether the token at each position is an assistant token


@dataclass
class StepStats:
    """Sums over positions, per TTT step (tensors on the training device until `merge`d for logging)."""

    loss_sum: list[torch.Tensor] = field(default_factory=list)
    loss_count: list[torch.Tensor] = field(default_factory=list)
    correct: list[torch.Tensor] = field(default_factory=list)
    chain_correct: list[torch.Tensor] = field(default_factory=list)
    count: list[torch.Tensor] = field(default_factory=list)

    def add_empty(self, like: torch.Tensor) -> None:
        """A step with no position inside the rows (rows shorter than the unroll) still gets its column."""
        for row in (self.loss_sum, self.loss_count, self.correct, self.chain_correct, self.count):
            row.append(like.new_zeros(()))

    def stacked(self) -> torch.Tensor:
        """[5, K] float tensor, so logging needs one device-to-host copy."""
        rows = (self.loss_sum, self.loss_count, self.correct, self.chain_correct, self.count)
        return torch.stack([torch.stack([t.float() for t in row]) for row in rows])


def ttt_objective(
    drafter: Eagle3Drafter,
    step_outputs: list[torch.Tensor],
    targets: Targets,
    step_weights: list[float],
) -> tuple[torch.Tensor, StepStats]:
    """Weighted sum of per-step mean losses, and the step statistics."""
    seq = targets.argmax.shape[1]
    total = step_outputs[0].new_zeros((), dtype=torch.float32)
    stats = StepStats()
    chain_ok: torch.Tensor | None = None
    for step, (hidden, weight) in enumerate(zip(step_outputs, step_weights, strict=True)):
        usable = seq - 2 - step  # base positions j whose predicted token t_{j+2+k} lies inside the row
        if usable <= 0:
            stats.add_empty(total)
            continue
        logits = drafter.logits(hidden[:, :usable])
        target_probs = targets.probs[:, 1 + step : 1 + step + usable]
        target_ids = targets.argmax[:, 1 + step : 1 + step + usable]
        counted = targets.loss_mask[:, 2 + step : 2 + step + usable]
        trained = counted & targets.in_draft[:, 1 + step : 1 + step + usable]
        ce = _soft_cross_entropy(logits.flatten(0, 1), target_probs.flatten(0, 1))
        loss_sum = (ce.view_as(trained) * trained).sum()
        total = total + weight * loss_sum / trained.sum().clamp(min=1)
        with torch.no_grad():
            correct = drafter.draft_to_target(logits.argmax(dim=-1)) == target_ids
            chain_ok = correct if chain_ok is None else chain_ok[:, :usable] & correct
            stats.loss_sum.append(loss_sum.detach())
            stats.loss_count.append(trained.sum())
            stats.correct.append((correct & counted).sum())
            stats.chain_correct.append((chain_ok & counted).sum())
            stats.count.append(counted.sum())
    return total, stats


def soft_cross_entropy(logits: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """-sum_v p_v log softmax(logits)_v per row, in float32 (forward KL to the target, up to a constant)."""
    return -(probs.float() * torch.log_softmax(logits.float(), dim=-1)).sum(dim=-1)


# Compiled on a GPU the float32 upcast stays inside fused kernels instead of materialising [tokens, vocab]
# float32 copies at every TTT step.
_soft_cross_entropy = CompiledOnCuda(soft_cross_entropy, dynamic=True)


def summarise(sums: torch.Tensor, step_weights: list[float]) -> dict[str, float]:
    """Metrics from summed `StepStats.stacked()` rows: loss (the weighted objective), loss_k, acc_k,
    full_acc_k and est_accept_len."""
    loss_sum, loss_count, correct, chain_correct, count = sums.tolist()
    metrics: dict[str, float] = {"loss": 0.0}
    tau = 1.0
    for k in range(len(count)):
        metrics[f"loss_{k}"] = loss_sum[k] / max(loss_count[k], 1.0)
        metrics["loss"] += step_weights[k] * metrics[f"loss_{k}"]
        metrics[f"acc_{k}"] = correct[k] / max(count[k], 1.0)
        metrics[f"full_acc_{k}"] = chain_correct[k] / max(count[k], 1.0)
        tau += metrics[f"full_acc_{k}"]
    metrics["est_accept_len"] = tau
    return metrics
