"""Sequence packing: whole samples back to back in rows of up to `row_len` tokens, kept strictly apart.

An unpacked batch pads every sample to the batch's longest; a packed row fills the same room with more
samples (speculators' multipack does this). Packing changes only where the tokens sit, never what the drafter
computes for a sample; `RowLayout` carries what keeps the samples apart:

* attention: a query attends only to keys of its own sample (block-diagonal causal over the step-0 keys;
  the keys TTT steps add at the query's own position are always of its sample),
* rope positions restart at 0 in every sample,
* the tokens the TTT steps read are 0 past the end of the sample, as in a padded unpacked row, never the
  next sample's first tokens,
* the objective counts a position only when the token it predicts lies in its own sample.

So a sample's statistics in a packed row are those it has alone (tests/ml/test_packing.py checks it, at every
TTT step). The padding after a row's last sample is one more segment, whose loss mask is 0.

Rows are planned by best-fit decreasing within windows of PACK_WINDOW shuffled samples: tight rows, while
which samples share a row (and a step) changes every epoch, as the unpacked planner's batches do.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

PACK_WINDOW = 1024  # samples packed together; large enough for tight rows, small enough to stay well mixed

Pack = tuple[int, ...]  # the dataset rows of one packed row, in order


class RowLayout(NamedTuple):
    """Per position of a [B, S] batch of packed rows."""

    segments: torch.Tensor  # which sample of its row (0, 1, ...; the padding after the last is one more)
    positions: torch.Tensor  # position within that sample: the rope position of TTT step 0
    tokens_after: torch.Tensor  # positions after this one in the same sample

    def to(self, device: torch.device) -> RowLayout:
        return RowLayout(*(t.to(device, non_blocking=True) for t in self))

    def pin_memory(self) -> RowLayout:
        return RowLayout(*(t.pin_memory() for t in self))


def row_layout(sample_lengths: Sequence[Sequence[int]], seq: int) -> RowLayout:
    """The layout of rows holding samples of these lengths, each row padded to `seq` positions."""
    rows = [_one_row(lengths, seq) for lengths in sample_lengths]
    return RowLayout(*(torch.stack(parts) for parts in zip(*rows, strict=True)))


def _one_row(lengths: Sequence[int], seq: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    filled = sum(lengths)
    if filled > seq:
        raise ValueError(f"samples of {filled} tokens do not fit a row of {seq}")
    spans = torch.tensor([*lengths, seq - filled] if filled < seq else list(lengths))
    ends = spans.cumsum(0)
    segments = torch.repeat_interleave(torch.arange(len(spans)), spans)
    index = torch.arange(seq)
    return segments, index - (ends - spans)[segments], ends[segments] - 1 - index


def pack_rows(samples: Sequence[int], lengths: Mapping[int, int], row_len: int) -> list[Pack]:
    """Best-fit decreasing: longest sample first, each into the fullest row it still fits (a new one if
    none). Samples keep their dataset order within a row. Every length must be at most `row_len`."""
    order = sorted(samples, key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, row number), sorted: the best fit is the first that fits
    for sample in order:
        need = lengths[sample]
        if need > row_len:
            raise ValueError(f"sample {sample} has {need} tokens, more than a row of {row_len}")
        at = bisect.bisect_left(free, (need, -1))
        if at == len(free):
            rows.append([])
            room, row = row_len, len(rows) - 1
        else:
            room, row = free.pop(at)
        rows[row].append(sample)
        if room - need > 0:
            bisect.insort(free, (room - need, row))
    return [tuple(sorted(row)) for row in rows]


def epoch_packs(
    indices: list[int],
    seq_lens: list[int],
    *,
    rows_per_batch: int,
    row_len: int,
    epoch: int,
    seed: int,
    rank: int = 0,
    world: int = 1,
) -> list[list[Pack]]:
    """This epoch's batches of packed rows, the same on every run for a given seed (resume relies on it).

    Samples are shuffled and packed window by window; within a window the rows are grouped by fill, so the
    rows of a batch pad little; then the batches are shuffled, and with several ranks each takes every
    world-th batch (cut to a multiple of `world`, as unpacked)."""
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(indices)
    rng.shuffle(order)
    lengths = {i: min(seq_lens[i], row_len) for i in order}
    batches: list[list[Pack]] = []
    for start in range(0, len(order), PACK_WINDOW):
        rows = pack_rows(order[start : start + PACK_WINDOW], lengths, row_len)
        rows.sort(key=lambda row: (sum(lengths[i] for i in row), row))
        batches += [rows[i : i + rows_per_batch] for i in range(0, len(rows), rows_per_batch)]
    rng.shuffle(batches)
    usable = len(batches) - len(batches) % world if world > 1 else len(batches)
    return batches[rank:usable:world]


@dataclass(frozen=True)
class PackingReport:
    """How one epoch's plan packs: rows and samples, and the padded share of the positions computed, packed
    and as the unpacked planner would batch the same samples."""

    rows: int
    samples: int
    tokens: int
    padded_positions: int
    unpacked_tokens: int
    unpacked_padded_positions: int

    @property
    def padding_fraction(self) -> float:
        return self.padded_positions / max(self.tokens + self.padded_positions, 1)

    @property
    def unpacked_padding_fraction(self) -> float:
        return self.unpacked_padded_positions / max(self.unpacked_tokens + self.unpacked_padded_positions, 1)

    def metrics(self) -> dict[str, float]:
        return {
            "pack/rows": float(self.rows),
            "pack/samples": float(self.samples),
            "pack/samples_per_row": self.samples / max(self.rows, 1),
            "pack/padding_fraction": self.padding_fraction,
            "pack/unpacked_padding_fraction": self.unpacked_padding_fraction,
            "pack/padding_saved": self.unpacked_padding_fraction - self.padding_fraction,
        }


def padded_positions(rows: Sequence[Sequence[int]], pad_multiple: int) -> int:
    """Positions of padding when each batch of rows (given by their token counts) is padded to its longest,
    rounded up to `pad_multiple` as the collate function does."""
    total = 0
    for batch in rows:
        longest = -(-max(batch) // pad_multiple) * pad_multiple
        total += sum(longest - n for n in batch)
    return total


def packing_report(
    packed: Sequence[Sequence[Pack]],
    unpacked: Sequence[Sequence[int]],
    seq_lens: Sequence[int],
    *,
    row_len: int,
    pad_multiple: int,
) -> PackingReport:
    """The report of an epoch's packed batches beside the unpacked batches of the same epoch."""

    def tokens(sample: int) -> int:
        return min(seq_lens[sample], row_len)

    packed_rows = [[sum(tokens(i) for i in row) for row in batch] for batch in packed]
    unpacked_rows = [[tokens(i) for i in batch] for batch in unpacked]
    return PackingReport(
        rows=sum(len(batch) for batch in packed),
        samples=sum(len(row) for batch in packed for row in batch),
        tokens=sum(map(sum, packed_rows)),
        padded_positions=padded_positions(packed_rows, pad_multiple),
        unpacked_tokens=sum(map(sum, unpacked_rows)),
        unpacked_padded_positions=padded_positions(unpacked_rows, pad_multiple),
    )
