"""Background writing of hidden-state batches, so the GPU, the copy to host and the disk all stay busy.

The extraction loop hands over each batch as a host tensor plus a CUDA event that fires when the
device-to-host copy has landed; writer threads wait on that event, then stream one safetensors file per
sample. The queue is bounded: when the disk is the bottleneck, `submit` blocks, which caps the pinned host
memory in flight at about `depth + threads` batches instead of letting it grow without limit.

With `durable`, each thread flushes its file to the disk (fdatasync) before renaming it into place. On a
host with much memory this is also what keeps the disk busy during the run: otherwise the page cache takes
gigabytes of dirty data without writing any back, and the whole write happens in the final sync, after the
GPU is done (measured on the H200 host: docs/benchmarks.md). And a crash can never leave a file that has
its final name and size but not its data, which resume would take for complete.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from drafting.ml.hidden_store import hidden_path, write_safetensors


@dataclass
class HostBatch:
    states: torch.Tensor  # [B, S, 4, T] right-padded rows, or with `packed` [N, 4, T]: the rows end to end
    ready: Any  # torch.cuda.Event marking the end of the copy, or None for CPU tensors
    rows: list[tuple[int, torch.Tensor]]  # (dataset index, token ids [seq_len])
    packed: bool = False  # SGLang's extend batches carry no padding: row i follows row i-1's last token

    def row_states(self) -> list[torch.Tensor]:
        """Each row's [seq_len, 4, T] states, in `rows` order."""
        lengths = [token_ids.shape[0] for _, token_ids in self.rows]
        if self.packed:
            return list(self.states.split(lengths))
        return [self.states[row, :seq_len] for row, seq_len in enumerate(lengths)]


@dataclass(frozen=True)
class Written:
    index: int
    tokens: int
    bytes: int


_STOP = None


class AsyncWriter:
    def __init__(self, output: Path, *, threads: int, depth: int, durable: bool = True) -> None:
        self._output = Path(output)
        self._durable = durable
        self._pending: queue.Queue[HostBatch | None] = queue.Queue(maxsize=depth)
        self._completed: queue.SimpleQueue[Written] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._threads = [
            threading.Thread(target=self._work, name=f"hs-writer-{i}", daemon=True) for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, batch: HostBatch) -> None:
        """Queue a batch; blocks while `depth` batches already wait. Re-raises a writer thread's error."""
        self._raise_if_failed()
        self._pending.put(batch)

    def completed(self) -> list[Written]:
        """Samples written since the last call."""
        done = []
        while True:
            try:
                done.append(self._completed.get_nowait())
            except queue.Empty:
                return done

    def close(self) -> list[Written]:
        """Finish every queued batch (they hold complete data), stop the threads, re-raise any error."""
        for _ in self._threads:
            self._pending.put(_STOP)
        for thread in self._threads:
            thread.join()
        self._raise_if_failed()
        return self.completed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _work(self) -> None:
        while (batch := self._pending.get()) is not _STOP:
            if self._error is not None:
                continue  # keep draining so a blocked submit() wakes up and sees the error
            try:
                self._write(batch)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop thread, which raises it
                self._error = exc

    def _write(self, batch: HostBatch) -> None:
        if batch.ready is not None:
            batch.ready.synchronize()
        for (index, token_ids), states in zip(batch.rows, batch.row_states(), strict=True):
            size = write_safetensors(
                hidden_path(self._output, index),
                {"hidden_states": states, "token_ids": token_ids},
                durable=self._durable,
            )
            self._completed.put(Written(index, token_ids.shape[0], size))
