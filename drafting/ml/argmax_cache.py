"""The target's full-vocab argmax of each training sample, kept from its first step for the later epochs.

A step needs two things from the target's frozen head: the distribution over the draft vocab (the loss) and
the argmax over the full vocab (accuracy, and whether the target's choice lies in the draft vocab at all).
Only the argmax needs every row of lm_head (128k at the 8B shape against a 32k draft vocab), and it cannot
change between epochs: the stored states and the head are the same. So the first epoch computes it with the
full head and keeps it per sample (int32, on the training device), and every later step multiplies by the
draft rows alone: about three quarters of the head's time at the 8B shape (docs/design/training-step.md).
A batch is served from the cache only when every sample in it is there; past the byte budget the rest are
computed each time, as before.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence

from drafting.ml.train_data import Batch

ARGMAX_CACHE_BYTES = 1 << 30  # 268 M tokens at 4 bytes: room for any run that fits a GPU's epoch budget


class ArgmaxCache:
    def __init__(self, budget_bytes: int = ARGMAX_CACHE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._by_sample: dict[int, torch.Tensor] = {}
        self._bytes = 0
        self.hits = 0  # batches served from the cache
        self.misses = 0  # batches that ran the full-vocab head

    def __len__(self) -> int:
        return len(self._by_sample)

    def report(self) -> dict[str, int]:
        """For the train result: how many steps ran the full-vocab head, and how many the draft rows alone."""
        return {"samples_kept": len(self), "steps_full_head": self.misses, "steps_draft_rows": self.hits}

    def lookup(self, batch: Batch) -> torch.Tensor | None:
        """The batch's [B, S] argmax (0 past each row's samples), or None unless every sample is kept."""
        if batch.samples is None:
            return None
        if any(index not in self._by_sample for row in batch.samples for index, _ in row):
            self.misses += 1
            return None
        rows = [torch.cat([self._by_sample[index] for index, _ in samples]) for samples in batch.samples]
        # one padded copy in C++ rather than a Python loop of row copies: this runs before every step
        kept = pad_sequence(rows, batch_first=True)
        argmax = torch.zeros(batch.input_ids.shape, dtype=torch.long, device=batch.input_ids.device)
        argmax[:, : kept.shape[1]] = kept
        self.hits += 1
        return argmax

    def store(self, batch: Batch, argmax: torch.Tensor) -> None:
        """Keep each sample's stretch of `argmax` [B, S] that is not kept yet, while the budget allows."""
        if batch.samples is None:
            return
        for row, samples in enumerate(batch.samples):
            start = 0
            for index, length in samples:
                size = length * 4
                if index not in self._by_sample and self._bytes + size <= self.budget_bytes:
                    self._by_sample[index] = argmax[row, start : start + length].to(torch.int32)
                    self._bytes += size
                start += length
