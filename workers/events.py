"""Reads a stage's structured events from its event pipe and records them, each in a short transaction."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from typing import Any

from app.artifacts import service as artifacts
from app.core.config import Settings
from app.core.db import session_scope
from app.jobs import lifecycle
from app.servers import service as servers

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
        self.error: dict[str, Any] | None = None
        self._metrics: list[tuple[str, int, float]] = []
        self._last_progress = 0.0
        self._pending_progress: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._read, name=f"events-{job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def child_started(self) -> None:
        """Close our copy of the write end so EOF arrives when the child exits."""
        os.close(self.write_fd)

    def join(self) -> None:
        self._thread.join()
        self._flush_metrics()
        self._flush_progress()

    def _read(self) -> None:
        with os.fdopen(self.read_fd, "r", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    logger.warning("job %s: unreadable event %r", self.job_id, line[:200])
                    continue
                if isinstance(event, dict):
                    self._handle(event)

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        try:
            if kind == "metric":
                self._metrics.append((str(event["name"])[:128], int(event["step"]), float(event["value"])))
                if len(self._metrics) >= _METRIC_BATCH:
                    self._flush_metrics()
            elif kind == "progress":
                self._pending_progress = event
                if time.monotonic() - self._last_progress >= _PROGRESS_EVERY_S:
                    self._flush_progress()
            elif kind == "artifact":
                self._record(
                    lambda s: artifacts.record_artifact(
                        s,
                        job_id=self.job_id,
                        host=self.host,
                        kind=str(event["kind"]),
                        path=str(event["path"]),
                        meta=dict(event.get("meta") or {}),
                    )
                )
            elif kind == "server":
                self._record(
                    lambda s: servers.record_server_event(s, job_id=self.job_id, host=self.host, event=event)
                )
            elif kind == "result":
                self.result = event.get("result") or {}
            elif kind == "error":
                self.error = event
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("job %s: malformed %s event: %s", self.job_id, kind, exc)

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
                fraction=float(event.get("fraction", 0.0)),
                message=str(event.get("message", "")),
            )
        )

    def _record(self, action: Any) -> None:
        try:
            with session_scope(self.settings) as session:
                action(session)
        except Exception as exc:  # a lost progress update must not kill the job
            logger.warning("job %s: could not record an event: %s", self.job_id, exc)
