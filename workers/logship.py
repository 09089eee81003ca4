"""Ships a job's log lines to the database so they survive the host.

Every line gets the next per-job seq, goes to a file on the host at once and into an in-memory batch; a
shipping thread writes batches (every ≤ log_batch_interval_s or log_batch_bytes) with idempotent inserts
and retries until the database takes them. Memory is bounded: past log_buffer_bytes, lines are dropped and
counted, and a marker line says how many. Past max_log_bytes_per_job, the oldest stored lines are deleted
and a marker line in their place says how many. close() flushes everything before the job is recorded
as ended.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from app.core.config import Settings
from app.core.db import session_scope
from app.logs import service as logs
from app.logs.notify import publish_log_batch
from app.logs.service import LogRow

logger = logging.getLogger("eyas.logship")
_ROW_OVERHEAD = 48  # bytes of bookkeeping we count per line besides its text
_MAX_BATCH_BYTES = 4 * 1024 * 1024  # one insert may carry a backlog this large


@dataclass
class ShipperStats:
    lines: int = 0
    bytes: int = 0
    dropped: int = 0
    batches: int = 0
    trimmed_lines: int = 0


class LogShipper:
    def __init__(
        self,
        settings: Settings,
        job_id: uuid.UUID,
        *,
        file_path: Path | None,
        start_seq: int = 0,
        start: bool = True,
    ) -> None:
        self.settings = settings
        self.job_id = job_id
        self.stats = ShipperStats()
        self._seq = start_seq
        self._pending: deque[LogRow] = deque()
        self._pending_bytes = 0
        self._dropped_since_marker = 0
        self._stored: deque[tuple[int, int]] = deque()  # (last seq of a batch, its bytes) for retention
        self._stored_bytes = 0
        # Batches stay well under the per-job limit so trimming can keep the newest ~90 % of it.
        self._max_batch = min(_MAX_BATCH_BYTES, max(4096, settings.max_log_bytes_per_job // 10))
        self._cond = threading.Condition()
        self._closing = False
        self._file: IO[str] | None = _open_log_file(file_path)
        self._thread = threading.Thread(target=self._ship_loop, name=f"logship-{job_id}", daemon=True)
        if start:
            self._thread.start()

    def start(self) -> None:
        """Start shipping (a shipper made with start=False; lines wait in memory until then). Idempotent."""
        if self._thread.ident is None:
            self._thread.start()

    def on_line(self, stream: str, text: str) -> None:
        """Called by the process runner's reader threads for every line."""
        size = len(text) + _ROW_OVERHEAD
        with self._cond:
            if self._pending_bytes + size > self.settings.log_buffer_bytes:
                self._dropped_since_marker += 1
                self.stats.dropped += 1
                return
            if self._dropped_since_marker:
                self._append(
                    "stderr", f"[eyas: {self._dropped_since_marker} line(s) dropped: log buffer full]"
                )
                self._dropped_since_marker = 0
            self._append(stream, text)
            if self._pending_bytes >= self.settings.log_batch_bytes:
                self._cond.notify()

    def line_sink(self) -> Callable[[str, str], None]:
        return self.on_line

    def close(self, timeout_s: float | None = None) -> None:
        """Ship everything still pending; returns once it is stored (the job is recorded as ended after)."""
        self.start()
        with self._cond:
            if self._dropped_since_marker:
                self._append(
                    "stderr", f"[eyas: {self._dropped_since_marker} line(s) dropped: log buffer full]"
                )
                self._dropped_since_marker = 0
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout_s)
        if self._file is not None:
            self._file.close()

    def _append(self, stream: str, text: str) -> None:
        self._seq += 1
        row = (self._seq, datetime.now(UTC), stream, text)
        self._pending.append(row)
        self._pending_bytes += len(text) + _ROW_OVERHEAD
        self.stats.lines += 1
        self.stats.bytes += len(text)
        if self._file is not None:
            self._file.write(f"{stream[:3]} {text}\n")

    def _ship_loop(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            if batch:
                self._ship(batch)

    def _next_batch(self) -> list[LogRow] | None:
        with self._cond:
            if not self._pending and not self._closing:
                self._cond.wait(self.settings.log_batch_interval_s)
            if not self._pending:
                return None if self._closing else []
            batch: list[LogRow] = []
            size = 0
            while self._pending and size < self._max_batch:
                row = self._pending.popleft()
                batch.append(row)
                size += len(row[3]) + _ROW_OVERHEAD
            self._pending_bytes -= size
            if self._file is not None:
                self._file.flush()
            return batch

    def _ship(self, batch: list[LogRow]) -> None:
        delay = 0.05
        retry = False
        while True:
            try:
                with session_scope(self.settings) as session:
                    logs.store_lines(session, self.job_id, batch, maybe_stored=retry)
                break
            except Exception as exc:  # noqa: BLE001 - the database may be restarting: keep the batch and retry
                logger.warning("log batch for job %s not stored yet (%s); retrying", self.job_id, exc)
                retry = True  # the failed attempt may have committed before its answer was lost
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        self.stats.batches += 1
        publish_log_batch(self.settings, self.job_id, batch[-1][0])
        self._account(batch)

    def _account(self, batch: list[LogRow]) -> None:
        size = sum(len(r[3]) + _ROW_OVERHEAD for r in batch)
        self._stored.append((batch[-1][0], size))
        self._stored_bytes += size
        if self._stored_bytes > self.settings.max_log_bytes_per_job:
            self._trim()

    def _trim(self) -> None:
        """Delete the oldest batches until the job is under its byte limit; a marker takes their place."""
        cutoff = 0
        while self._stored and self._stored_bytes > self.settings.max_log_bytes_per_job * 0.9:
            cutoff, size = self._stored.popleft()
            self._stored_bytes -= size
        if not cutoff:
            return
        try:
            with session_scope(self.settings) as session:
                removed = logs.delete_before(session, self.job_id, cutoff + 1)
                self.stats.trimmed_lines += removed - (
                    1 if self.stats.trimmed_lines else 0
                )  # not the old marker
                marker = (
                    cutoff,
                    datetime.now(UTC),
                    "stderr",
                    f"[eyas: {self.stats.trimmed_lines} earlier line(s) dropped: "
                    f"log limit {self.settings.max_log_bytes_per_job} bytes per job]",
                )
                logs.store_lines(session, self.job_id, [marker])
        except Exception as exc:  # noqa: BLE001 - trimming is best effort: the lines are stored already
            logger.warning("could not trim the log of job %s: %s", self.job_id, exc)


def _open_log_file(path: Path | None) -> IO[str] | None:
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("a", encoding="utf-8", buffering=1024 * 1024)
    except OSError as exc:
        logger.warning("cannot write the host log file %s: %s", path, exc)
        return None
