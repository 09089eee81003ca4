"""Simulated acceptance: SGLang's accept length, replayed on teacher-forced sequences cycle by cycle.

The per-position estimate (`est_accept_len_d{d}` = 1 + Σ_{k<d} full_acc_k, objective.py) averages over every
assistant position. Serving does not visit every position as the start of a draft: a verify cycle starts
where the last one ended, just after the target corrected a rejected draft, and an accepted chain skips
the positions inside it. Where drafts go wrong in clusters (hard stretches of text) and right in runs (easy
ones), cycles start on hard stretches more often than the average counts them, and the per-position figure
overstates serving. On SmolLM2-135M (docs/design/checkpoint-choice.md) it said 2.05 at depth 5 where SGLang
measured 1.72 on the same 72 held-out questions, while eyas's free-running `eval` was within 2 %.

Here each sequence is walked the way a chain (topk 1) decodes it. A cycle at base position j drafts
t_{j+2}, t_{j+3}, ... (objective.py's alignment: TTT step k at j predicts t_{j+2+k}, fed the data's tokens,
which equal the drafts while they are right); it accepts a = min(leading right steps at j, depth) drafts,
the target adds its bonus token, and the next cycle starts at j + a + 1. A segment of assistant tokens
(an answer) counts its first token, which the prefill produces, as SGLang's completion tokens do, and its
last cycle never counts tokens past the answer's end. The figure is Σ tokens / Σ cycles over all
segments: SGLang's `spec_accept_length` (completion tokens over verify steps), and eval's
`accept_length_meta`. SpecForge reports a simulated accept length from its TTT accuracies the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

SIMULATED_FORMULA = (
    "sum tokens / sum verify cycles, each teacher-forced sequence decoded cycle by cycle: a cycle accepts "
    "min(leading right TTT steps, d) drafts plus the bonus token and the next starts where it ended "
    "(SGLang's spec_accept_length = completion tokens / verify steps)"
)
WALK_ROWS = 3  # the walk tensor's rows: leading right steps, counted, previous token an assistant token


def walk_inputs(chains: torch.Tensor, counted: torch.Tensor, assistant_before: torch.Tensor) -> torch.Tensor:
    """[3, B, S] int tensor the walk reads, one device-to-host copy: per base position j, the number of
    leading TTT steps right *and* counted from j, whether step 0 at j is counted (t_{j+2} an assistant token
    of j's own sample), and whether t_{j+1} is an assistant token (j can then start a draft)."""
    return torch.stack([chains.long(), counted.long(), assistant_before.long()])


def walk_row(
    chains: np.ndarray, counted: np.ndarray, assistant_before: np.ndarray, depth: int
) -> tuple[int, int]:
    """(tokens, verify cycles) of decoding one row's answers with a chain of `depth` drafts. Jumps from
    cycle to cycle (the loop runs once per cycle, not per position)."""
    n = len(chains)
    positions = np.arange(n)
    misses = np.flatnonzero(~counted.astype(bool))
    # run[j]: the answer tokens left after t_{j+1}, i.e. consecutive counted base positions from j on
    run = np.append(misses, n)[np.searchsorted(misses, positions)] - positions
    starts = np.flatnonzero(counted.astype(bool) & assistant_before.astype(bool))
    tokens = cycles = 0
    j, inside = 0, False  # inside: j continues an answer whose first token is already counted
    while True:
        if not inside:
            at = int(np.searchsorted(starts, j))
            if at == len(starts):
                return tokens, cycles
            j = int(starts[at])
            tokens += 1  # the answer's first token t_{j+1}, which the prefill (or a verify) produced
        step = min(int(chains[j]), depth) + 1  # the accepted drafts and the bonus token
        step = min(step, int(run[j]))  # never past the answer's last token
        tokens += step
        cycles += 1
        j += step
        inside = j < n and bool(counted[j])


def walk(inputs: torch.Tensor, depths: Sequence[int]) -> torch.Tensor:
    """[2, len(depths)] float64 sums (tokens, cycles) over a batch's rows, one column per depth."""
    chains, counted, before = inputs.cpu().numpy()
    sums = torch.zeros(2, len(depths), dtype=torch.float64)
    for row in range(chains.shape[0]):
        for column, depth in enumerate(depths):
            tokens, cycles = walk_row(chains[row], counted[row], before[row], depth)
            sums[0, column] += tokens
            sums[1, column] += cycles
    return sums


def accept_lengths(sums: torch.Tensor, depths: Sequence[int]) -> dict[int, float]:
    """Depth -> Σ tokens / Σ cycles from `walk` sums (added up over batches and ranks); depths that saw no
    cycle are left out."""
    tokens, cycles = sums.tolist()
    return {depth: t / c for depth, t, c in zip(depths, tokens, cycles, strict=True) if c > 0}
