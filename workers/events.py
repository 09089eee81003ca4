"""Reads a stage's structured events from its event pipe and records them, each in a short transaction."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from typing import Any

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs import lifecycle
from app.servers import service as servers
from contract.events import (
    EVENT_TYPES,
    ArtifactEvent,
    ErrorEvent,
    MetricEvent,
    ProgressEvent,
    ResultEvent,
    ServerEvent,
    StageEvent,
    parse_event,
)

logger = logging.getLogger("eyas.events")
_PROGRESS_EVERY_S = 0.5
_METRIC_BATCH = 200


class EventPump:
    """Owns the read end of the event pipe; the child writes JSON lines to the write end."""

    def __init__(self, settings: Settings, job_id: uuid.UUID, host: str) -> None:
        self.settings = settings
        self.job_id = job_id
        self.host = host
        self.read_fd, self.write_fd = os.pipe()
        self.result: dict[str, Any] | None = None
        self.error: ErrorEvent | None = None
        self._metrics: list[tuple[str, int, float]] = []
        self._last_progress = 0.0
        self._pending_progress: ProgressEvent | None = None
        self._write_open = True
        self._thread = threading.Thread(target=self._read, name=f"events-{job_id}", daemon=True)

    def start(self) -> None:
        """Start reading (events wait in the pipe until then). Idempotent."""
        if self._thread.ident is None:
            self._thread.start()

    def child_started(self) -> None:
        """Close our copy of the write end so EOF arrives when the child exits (or now, when none started)."""
        if self._write_open:
            self._write_open = False
            os.close(self.write_fd)

    def join(self) -> None:
        self.child_started()
        self._thread.join()
        self._flush_metrics()
        self._flush_progress()

    def _read(self) -> None:
        with os.fdopen(self.read_fd, "r", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError:
                    logger.warning("job %s: unreadable event %r", self.job_id, line[:200])
                    continue
                if not isinstance(raw, dict) or raw.get("type") not in EVENT_TYPES:
                    continue  # a stage's own report (benchmark_table, smoke…): not recorded here
                try:
                    event = parse_event(raw)
                except ValueError as exc:  # pydantic's ValidationError
                    logger.warning("job %s: malformed %s event: %s", self.job_id, raw.get("type"), exc)
                    continue
                self._handle(event)

    def _handle(self, event: StageEvent) -> None:
        match event:
            case MetricEvent():
                self._metrics.append((event.name[:128], event.step, event.value))
                if len(self._metrics) >= _METRIC_BATCH:
                    self._flush_metrics()
            case ProgressEvent():
                self._pending_progress = event
                if time.monotonic() - self._last_progress >= _PROGRESS_EVERY_S:
                    self._flush_progress()
            case ArtifactEvent():
                artifact = event
                self._record(
                    lambda s: lifecycle.record_artifact(
                        s,
                        job_id=self.job_id,
                        host=self.host,
                        kind=artifact.kind,
                        path=artifact.path,
                        meta=dict(artifact.meta or {}),
                    )
                )
            case ServerEvent():
                server = event.model_dump()
                self._record(
                    lambda s: servers.record_server_event(s, job_id=self.job_id, host=self.host, event=server)
                )
            case ResultEvent():
                self.result = event.result or {}
            case ErrorEvent():
                self.error = event

    def _flush_metrics(self) -> None:
        rows, self._metrics = self._metrics, []
        if rows:
            self._record(lambda s: lifecycle.record_metrics(s, job_id=self.job_id, rows=rows))

    def _flush_progress(self) -> None:
        event, self._pending_progress = self._pending_progress, None
        if event is None:
            return
        self._last_progress = time.monotonic()
        self._record(
            lambda s: lifecycle.record_progress(
                s,
                job_id=self.job_id,
                fraction=event.fraction,
                message=event.message,
            )
        )

    def _record(self, action: Any) -> None:
        try:
            with session_scope(self.settings) as session:
                action(session)
        except Exception as exc:  # noqa: BLE001 - a lost progress update must not kill the job
            logger.warning("job %s: could not record an event: %s", self.job_id, exc)
