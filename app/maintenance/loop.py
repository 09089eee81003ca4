"""Housekeeping that keeps the database the record: reap lost jobs, re-send unclaimed ones, expire old logs.

Every step is a conditional update, so the API and any number of workers may run it at once. It sits above
the domains it tends (jobs, servers, logs) and calls their services; none of them imports it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import timedelta

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs import lifecycle
from app.logs import service as logs
from app.models.base import utcnow
from app.servers import service as servers

logger = logging.getLogger("eyas.maintenance")
_RETENTION_EVERY_S = 600.0


def tick(settings: Settings, *, reap: bool = True) -> dict[str, int]:
    lost: list[uuid.UUID] = []
    if reap:
        with session_scope(settings) as session:
            lost = lifecycle.reap_lost(session, settings)
            for job_id in lost:
                servers.end_server_of_job(
                    session, job_id=job_id, state="failed", message="its worker was lost"
                )
    with session_scope(settings) as session:
        sent = lifecycle.redispatch(session, settings)
    return {"lost": len(lost), "redispatched": sent}


def expire_logs(settings: Settings) -> int:
    with session_scope(settings) as session:
        cutoff = utcnow() - timedelta(days=settings.log_retention_days)
        return logs.expire_finished_before(session, cutoff)


class MaintenanceLoop(threading.Thread):
    def __init__(self, settings: Settings) -> None:
        super().__init__(name="eyas-maintenance", daemon=True)
        self.settings = settings
        self._stop = threading.Event()
        self._last_retention = 0.0
        self._healthy_since: float | None = time.monotonic()

    def run(self) -> None:
        while not self._stop.wait(self.settings.maintenance_interval_s):
            try:
                fair = self._reaping_is_fair()
                done = tick(self.settings, reap=fair)
                if self._healthy_since is None:
                    self._healthy_since = time.monotonic()
                if any(done.values()):
                    logger.info("maintenance: %s", done)
                if time.monotonic() - self._last_retention > _RETENTION_EVERY_S:
                    self._last_retention = time.monotonic()
                    expire_logs(self.settings)
            except Exception as exc:  # noqa: BLE001 - database or broker down: try again next tick
                logger.warning("maintenance tick failed: %s", exc)
                self._healthy_since = None

    def _reaping_is_fair(self) -> bool:
        # Heartbeats could not be written while the database was away: a job is judged lost only once the
        # database has answered this loop for a whole lost-after period, so live workers have had time to
        # beat again. (A restart of PostgreSQL is also discounted by the reaper's query itself, whether or
        # not this loop saw it: repository.stale_active.)
        if self._healthy_since is None:
            return False
        grace = self.settings.lost_after_s + self.settings.heartbeat_s
        return time.monotonic() - self._healthy_since >= grace

    def stop(self) -> None:
        self._stop.set()
