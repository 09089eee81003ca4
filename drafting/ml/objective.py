"""The TTT training objective: soft cross-entropy against the target at every unrolled step, and the
per-position accuracies the acceptance-length estimate is built from.

Alignment (token t_i at position i, target state a_i after reading t_0..t_i):

* the drafter's step-0 input at position j is (t_{j+1}, a_j) and step k's is (t_{j+1+k}, its own step k-1
  output at j); step k predicts t_{j+2+k},
* its target is the target model's distribution at position j+1+k (restricted and renormalised to the draft
  vocab, as EAGLE and SpecForge do), and
* it counts where t_{j+2+k} is an assistant token (loss mask) - positions whose target argmax lies outside the
  draft vocab are left out of the loss, but count as misses in the accuracies. In a packed row t_{j+2+k}
  must also lie in j's own sample (`Targets.tokens_after`): the next sample's tokens are never a target.

Accuracies: `acc_k` is step k's accuracy over *all* counted positions (marginal: the tokens fed are the
data's and the state fed is the drafter's own, right or wrong at the earlier steps, so it is not conditioned
on them); `full_acc_k` counts base positions where steps 0..k were *all* right (f_k, cumulative), and
`cond_acc_k` = f_k / f_{k-1} is the rate of step k given steps 0..k-1 right (p_k, conditional; p_0 = f_0).
The acceptance-length estimate at depth d is SGLang's accept_length for a chain (topk 1): the bonus token
plus the expected number of accepted drafts per verify step, 1 + sum_{k=1..d} prod_{j<=k} p_j, which is
1 + sum_{k<d} f_k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from drafting.ml._compiled import CompiledOnCuda
from drafting.ml.drafter import Eagle3Drafter
from drafting.ml.simulated_acceptance import walk_inputs

# Depths (SGLang's --speculative-num-steps) the estimate is reported at, as val/est_accept_len_d{d}, besides
# the full unroll (est_accept_len): the depths a benchmark sweep usually runs.
ACCEPT_DEPTHS = (3, 5, 7)
ACCEPT_FORMULA = (
    "1 + sum_{k=1..d} prod_{j<=k} p_j (SGLang accept_length, chain of d drafts, topk 1; p_j = cond_acc)"
)


@dataclass
class Targets:
    probs: torch.Tensor  # [B, S, Vd] target distribution at each position over the draft vocab
    argmax: torch.Tensor  # [B, S] target's full-vocab argmax at each position
    in_draft: torch.Tensor  # [B, S] whether that argmax is in the draft vocab
    loss_mask: torch.Tensor  # [B, S] whether the token at each position is an assistant token
    # [B, S] packed rows: positions after each one in its sample (a step counts only predictions inside it)
    tokens_after: torch.Tensor | None = None


@dataclass
class StepStats:
    """Sums over positions, per TTT step (tensors on the training device until `merge`d for logging)."""

    loss_sum: list[torch.Tensor] = field(default_factory=list)
    loss_count: list[torch.Tensor] = field(default_factory=list)
    correct: list[torch.Tensor] = field(default_factory=list)
    chain_correct: list[torch.Tensor] = field(default_factory=list)
    count: list[torch.Tensor] = field(default_factory=list)
    # [3, B, S-2] per base position (simulated_acceptance.walk_inputs): what a cycle-by-cycle replay of
    # serving reads; None unless asked for, or when the rows are too short for a single step
    walk: torch.Tensor | None = None

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
    *,
    with_walk: bool = False,
) -> tuple[torch.Tensor, StepStats]:
    """Weighted sum of per-step mean losses, and the step statistics (with the simulated acceptance's walk
    inputs when `with_walk`: validation asks for them, training steps do not pay for them)."""
    seq = targets.argmax.shape[1]
    total = step_outputs[0].new_zeros((), dtype=torch.float32)
    stats = StepStats()
    chain_ok: torch.Tensor | None = None
    alive: torch.Tensor | None = None  # steps 0..k right *and* counted: a draft chain still accepted
    for step, (hidden, weight) in enumerate(zip(step_outputs, step_weights, strict=True)):
        usable = seq - 2 - step  # base positions j whose predicted token t_{j+2+k} lies inside the row
        if usable <= 0:
            stats.add_empty(total)
            continue
        logits = drafter.logits(hidden[:, :usable])
        target_probs = targets.probs[:, 1 + step : 1 + step + usable]
        target_ids = targets.argmax[:, 1 + step : 1 + step + usable]
        counted = _counted(targets, step, usable)
        trained = counted & targets.in_draft[:, 1 + step : 1 + step + usable]
        ce = _soft_cross_entropy(logits.flatten(0, 1), target_probs.flatten(0, 1))
        loss_sum = (ce.view_as(trained) * trained).sum()
        total = total + weight * loss_sum / trained.sum().clamp(min=1)
        with torch.no_grad():
            correct = drafter.draft_to_target(logits.argmax(dim=-1)) == target_ids
            chain_ok = correct if chain_ok is None else chain_ok[:, :usable] & correct
            if with_walk:
                alive = correct & counted if alive is None else alive[:, :usable] & correct & counted
                if stats.walk is None:  # step 0 sees every base position: the walk's columns
                    before = targets.loss_mask[:, 1 : 1 + usable]
                    stats.walk = walk_inputs(torch.zeros_like(counted), counted, before)
                stats.walk[0, :, :usable] += alive
            stats.loss_sum.append(loss_sum.detach())
            stats.loss_count.append(trained.sum())
            stats.correct.append((correct & counted).sum())
            stats.chain_correct.append((chain_ok & counted).sum())
            stats.count.append(counted.sum())
    return total, stats


def _counted(targets: Targets, step: int, usable: int) -> torch.Tensor:
    """Base positions j whose step predicts an assistant token t_{j+2+step} of j's own sample."""
    counted = targets.loss_mask[:, 2 + step : 2 + step + usable]
    if targets.tokens_after is None:
        return counted
    return counted & (targets.tokens_after[:, :usable] >= step + 2)


def soft_cross_entropy(logits: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """-sum_v p_v log softmax(logits)_v per row, in float32 (forward KL to the target, up to a constant)."""
    return -(probs.float() * torch.log_softmax(logits.float(), dim=-1)).sum(dim=-1)


# Compiled on a GPU the float32 upcast stays inside fused kernels instead of materialising [tokens, vocab]
# float32 copies at every TTT step.
_soft_cross_entropy = CompiledOnCuda(soft_cross_entropy, dynamic=True)


def accept_length(conditional: Sequence[float], depth: int) -> float:
    """SGLang's accept_length for a chain of `depth` drafts (topk 1): the bonus token plus the expected number
    of accepted drafts per verify step, 1 + sum_{k=1..d} prod_{j<=k} p_j, where p_j (conditional[j-1]) is the
    rate of draft j being accepted given drafts 1..j-1 were."""
    if not 1 <= depth <= len(conditional):
        raise ValueError(f"depth {depth} needs 1..{len(conditional)} conditional rates")
    total, chain = 1.0, 1.0
    for rate in conditional[:depth]:
        chain *= rate
        total += chain
    return total


def summarise(
    sums: torch.Tensor, step_weights: list[float], depths: Sequence[int] = ACCEPT_DEPTHS
) -> dict[str, float]:
    """Metrics from summed `StepStats.stacked()` rows: loss (the weighted objective), loss_k, acc_k,
    full_acc_k, cond_acc_k, est_accept_len (depth = the unroll) and est_accept_len_d{d} for the `depths`
    the unroll reaches."""
    loss_sum, loss_count, correct, chain_correct, count = sums.tolist()
    metrics: dict[str, float] = {"loss": 0.0}
    conditional: list[float] = []
    for k in range(len(count)):
        metrics[f"loss_{k}"] = loss_sum[k] / max(loss_count[k], 1.0)
        metrics["loss"] += step_weights[k] * metrics[f"loss_{k}"]
        metrics[f"acc_{k}"] = correct[k] / max(count[k], 1.0)
        metrics[f"full_acc_{k}"] = chain_correct[k] / max(count[k], 1.0)
        # The ratio of the cumulative rates, so the products telescope back to full_acc_k exactly (a chain
        # right at step k was right at k-1: only the counted positions at the row's end differ a little).
        before = metrics[f"full_acc_{k - 1}"] if k else 1.0
        metrics[f"cond_acc_{k}"] = metrics[f"full_acc_{k}"] / before if before > 0 else 0.0
        conditional.append(metrics[f"cond_acc_{k}"])
    metrics["est_accept_len"] = accept_length(conditional, len(conditional))
    for depth in depths:
        if depth <= len(conditional):
            metrics[f"est_accept_len_d{depth}"] = accept_length(conditional, depth)
    return metrics
