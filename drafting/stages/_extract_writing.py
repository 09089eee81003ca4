"""What both extract backends share once states are flowing: progress and throughput events, and the end
of the writing (queued batches land, a full disk is named as such)."""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass

from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.ml._writer import AsyncWriter, Written
from drafting.ml.extraction import PendingSample


@dataclass(frozen=True)
class RunTotals:
    samples: int
    tokens: int
    bytes: int


def close_writer(writer: AsyncWriter, progress: ExtractProgress) -> None:
    """Let queued batches land (they are complete data) before leaving, even on cancel or error."""
    try:
        progress.update(writer.close())
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise StageError(f"disk full while writing: {exc}", reason=TerminationReason.DISK_FULL) from exc
        raise


class ExtractProgress:
    """Progress and throughput events, at most one batch of them per second.

    With several ranks, rank 0 reports for all from its own `share` of the pending samples: the shares are
    dealt by length, so they progress alike (the result's figures are exact sums)."""

    def __init__(
        self, ctx: StageContext, rows: list[list[int]], pending: list[PendingSample], *, share: float = 1.0
    ) -> None:
        self._ctx = ctx
        self._share = max(share, 1e-9)
        self._total_tokens = max(sum(len(r) for r in rows), 1)
        self._done_tokens = self._total_tokens - sum(len(s.input_ids) for s in pending)
        self._started = time.monotonic()
        self._last_emit = 0.0
        self.samples_written = self.tokens_written = self.bytes_written = 0

    def update(self, written: list[Written]) -> None:
        for item in written:
            self.samples_written += 1
            self.tokens_written += item.tokens
            self.bytes_written += item.bytes
        self.emit()

    def tokens_per_s(self, written: RunTotals | None = None) -> float:
        tokens = written.tokens if written is not None else self.tokens_written / self._share
        return tokens / max(time.monotonic() - self._started, 1e-9)

    def emit(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_emit < 1.0:
            return
        self._last_emit = now
        done = min(self._done_tokens + round(self.tokens_written / self._share), self._total_tokens)
        rate = self.tokens_per_s()
        self._ctx.progress(
            done / self._total_tokens, f"{done} / {self._total_tokens} tokens, {rate:,.0f} tok/s"
        )
        step = self.samples_written
        self._ctx.metric("extract/tokens_per_s", rate, step)
        self._ctx.metric("extract/bytes_written", self.bytes_written, step)
        self._ctx.metric("extract/samples_written", self.samples_written, step)
