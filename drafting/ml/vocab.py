"""The draft vocabulary: the most frequent loss-masked target tokens, and the d2t offsets SGLang reads."""

from __future__ import annotations

import torch


def draft_token_ids(
    token_freq: dict[int, int], draft_vocab_size: int, target_vocab_size: int
) -> torch.Tensor:
    """The target ids the draft vocab covers, ascending.

    The `draft_vocab_size` most frequent ids (ties broken by id), padded with the lowest unused ids when the
    data has fewer distinct tokens (EAGLE, SpecForge and speculators all do the same), then sorted so that
    draft id order follows target id order.
    """
    if not 0 < draft_vocab_size <= target_vocab_size:
        raise ValueError(f"draft_vocab_size {draft_vocab_size} must be in 1..{target_vocab_size}")
    in_range = {t: c for t, c in token_freq.items() if 0 <= t < target_vocab_size and c > 0}
    chosen = sorted(in_range, key=lambda t: (-in_range[t], t))[:draft_vocab_size]
    taken = set(chosen)
    filler = (t for t in range(target_vocab_size) if t not in taken)
    chosen += [next(filler) for _ in range(draft_vocab_size - len(chosen))]
    return torch.tensor(sorted(chosen), dtype=torch.int64)


def d2t_offsets(draft_ids: torch.Tensor) -> torch.Tensor:
    """SGLang's `d2t`: target_id = draft_id + d2t[draft_id]."""
    return draft_ids - torch.arange(draft_ids.numel(), dtype=torch.int64)
