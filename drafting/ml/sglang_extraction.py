"""Extraction through an engine that packs samples end to end (SGLang's extend batches), writing the HF
backend's layout.

Nothing here imports sglang (`sglang_capture.py` does): given a capture that returns one batch's states as
[tokens, 4, T] rows packed in sample order, this packs the samples into batches the engine can hold, streams
the states to the same `AsyncWriter` the HF backend uses (same files, names, dtypes), and leaves the ranks of
a tensor-parallel group without a writer: each runs every batch, rank 0 alone writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from drafting.ml._writer import AsyncWriter, HostBatch, Written
from drafting.ml.extraction import BatchOutOfMemory, DeviceToHost, PendingSample
from drafting.ml.hidden_store import STATES_PER_TOKEN

NUM_AUX = STATES_PER_TOKEN - 1


class CaptureRefused(Exception):
    """The engine cannot give the states the extraction promises (the message says why, for the user)."""


@dataclass(frozen=True)
class BatchLimits:
    max_samples: int  # requests one forward may hold
    max_tokens: int  # tokens packed into one forward (a longer sample still goes alone)
    max_sample_tokens: int  # the longest sample the engine can hold at all (KV pool, context length)


class PackedCapture(Protocol):
    def limits(self) -> BatchLimits: ...

    def capture(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        """[sum of the rows' lengths, 4, T]: each token's 3 aux states and last pre-norm state, row by row."""
        ...


def packed_states(aux: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """[N, 4, T] from the logits processor's aux states (concatenated low‖mid‖high, [N, 3T]) and the final
    norm's input ([N, T]): the per-token rows of the HF layout (`hidden_store.py`)."""
    tokens, hidden = last.shape
    if aux.shape != (tokens, NUM_AUX * hidden):
        raise CaptureRefused(
            f"the target returned aux states of shape {tuple(aux.shape)} for {tokens} tokens, not "
            f"{NUM_AUX} layers of {hidden}: it captured other layers than the extraction asked for"
        )
    return torch.cat([aux.view(tokens, NUM_AUX, hidden), last.view(tokens, 1, hidden)], dim=1)


def too_long(pending: Sequence[PendingSample], limits: BatchLimits) -> list[PendingSample]:
    return [sample for sample in pending if len(sample.input_ids) > limits.max_sample_tokens]


def pack_batches(pending: Sequence[PendingSample], limits: BatchLimits) -> list[list[PendingSample]]:
    """Longest first, each batch at most `max_samples` samples and `max_tokens` tokens (a sample longer than
    `max_tokens` alone): a packed batch pays no padding, so it is filled by tokens, not by count."""
    ordered = sorted(pending, key=lambda sample: (-len(sample.input_ids), sample.index))
    batches: list[list[PendingSample]] = []
    tokens = 0
    for sample in ordered:
        size = len(sample.input_ids)
        if batches and len(batches[-1]) < limits.max_samples and tokens + size <= limits.max_tokens:
            batches[-1].append(sample)
            tokens += size
        else:
            batches.append([sample])
            tokens = size
    return batches


def extract_packed(
    target: PackedCapture,
    batches: list[list[PendingSample]],
    *,
    writer: AsyncWriter | None,
    device: torch.device,
    dtype: torch.dtype,
    check_cancelled: Callable[[], None],
    on_written: Callable[[list[Written]], None],
) -> None:
    """Capture every batch; hand the states to `writer` when this rank writes (None: it only computes)."""
    to_host = DeviceToHost(device)
    for batch in batches:
        check_cancelled()
        try:
            with torch.no_grad():
                states = target.capture([sample.input_ids for sample in batch]).to(dtype)
        except torch.OutOfMemoryError:
            raise BatchOutOfMemory(len(batch), max(len(s.input_ids) for s in batch)) from None
        if writer is None:
            continue
        host, ready = to_host(states)
        rows = [(sample.index, torch.tensor(sample.input_ids, dtype=torch.long)) for sample in batch]
        writer.submit(HostBatch(host, ready, rows, packed=True))
        on_written(writer.completed())
