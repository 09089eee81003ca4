"""Running the target over tokenized samples and streaming its hidden states to disk (the `extract` engine).

Samples are batched by length (longest first, so padding stays small and an out-of-memory error shows up on
the first batch rather than hours in), run through the target's decoder stack with capture hooks, copied to
pinned host memory on a side CUDA stream, and written by `AsyncWriter` threads while the next batch computes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from drafting.ml._writer import AsyncWriter, HostBatch, Written
from drafting.ml.capture import capture_hidden_states
from drafting.ml.hidden_store import bytes_per_token, hidden_path, is_complete
from drafting.ml.text_model import load_text_model
from drafting.support_matrix import CaptureKind

FILE_OVERHEAD_BYTES = 512  # safetensors header of one sample, generously rounded


@dataclass(frozen=True)
class PendingSample:
    index: int
    input_ids: list[int]


class BatchOutOfMemory(Exception):
    def __init__(self, batch_size: int, seq_len: int) -> None:
        super().__init__(f"out of memory on a batch of {batch_size} x {seq_len} tokens")
        self.batch_size = batch_size
        self.seq_len = seq_len


def pending_samples(output: Path, rows: list[list[int]], hidden_size: int) -> list[PendingSample]:
    """Rows whose file is missing, torn or of the wrong shape; complete files are kept as they are."""
    return [
        PendingSample(index, ids)
        for index, ids in enumerate(rows)
        if not is_complete(hidden_path(output, index), len(ids), hidden_size)
    ]


def required_bytes(pending: list[PendingSample], hidden_size: int, dtype: torch.dtype) -> int:
    tokens = sum(len(sample.input_ids) for sample in pending)
    return tokens * bytes_per_token(hidden_size, dtype) + len(pending) * FILE_OVERHEAD_BYTES


def length_sorted_batches(pending: list[PendingSample], batch_size: int) -> list[list[PendingSample]]:
    ordered = sorted(pending, key=lambda sample: (-len(sample.input_ids), sample.index))
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


def load_target_model(
    folder: Path,
    *,
    dtype: torch.dtype,
    device: torch.device,
    trust_remote_code: bool = False,
    log: Callable[[str], None] | None = None,
) -> nn.Module:
    """The target's text model (a wrapper's language model alone: text_model.py), on `device`."""
    model = load_text_model(folder, dtype=dtype, trust_remote_code=trust_remote_code, log=log)
    return model.to(device).eval()


def _padded(batch: list[PendingSample], device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Right-padded ids; no mask when all rows have the same length (lets SDPA take its causal fast path)."""
    longest = max(len(sample.input_ids) for sample in batch)
    ids = torch.zeros(len(batch), longest, dtype=torch.long)
    mask = torch.zeros(len(batch), longest, dtype=torch.long)
    for row, sample in enumerate(batch):
        ids[row, : len(sample.input_ids)] = torch.tensor(sample.input_ids)
        mask[row, : len(sample.input_ids)] = 1
    ragged = bool((mask == 0).any())
    return ids.to(device), (mask.to(device) if ragged else None)


class DeviceToHost:
    """Copies device batches into pinned host memory on a side stream, so the copy overlaps the next forward.

    Pinned blocks come from torch's caching host allocator: one allocation per batch is cheap after warm-up.
    """

    def __init__(self, device: torch.device) -> None:
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def __call__(self, states: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if self._stream is None:
            return states, None
        host = torch.empty(states.shape, dtype=states.dtype, pin_memory=True)
        self._stream.wait_stream(torch.cuda.current_stream(states.device))
        with torch.cuda.stream(self._stream):
            host.copy_(states, non_blocking=True)
            states.record_stream(self._stream)
            ready = torch.cuda.Event()
            ready.record(self._stream)
        return host, ready


def extract_batches(
    model: nn.Module,
    batches: list[list[PendingSample]],
    *,
    indices: list[int],
    capture: CaptureKind = CaptureKind.RESIDUAL_STREAM,
    device: torch.device,
    writer: AsyncWriter,
    check_cancelled: Callable[[], None],
    on_written: Callable[[list[Written]], None],
) -> None:
    """Forward every batch and hand its states to the writer; `on_written` sees samples as they land."""
    to_host = DeviceToHost(device)
    for batch in batches:
        check_cancelled()
        input_ids, attention_mask = _padded(batch, device)
        try:
            with torch.inference_mode():
                states = capture_hidden_states(model, input_ids, indices, attention_mask, capture)
        except torch.OutOfMemoryError:
            raise BatchOutOfMemory(len(batch), input_ids.shape[1]) from None
        host, ready = to_host(states)
        rows = [(sample.index, torch.tensor(sample.input_ids, dtype=torch.long)) for sample in batch]
        writer.submit(HostBatch(host, ready, rows))
        on_written(writer.completed())
