"""What a worker does for its host besides jobs: heartbeat its inventory, end orphaned processes."""

from __future__ import annotations

import logging
import platform
import threading

import psutil

from app.core.config import Settings
from app.core.db import session_scope
from app.hosts import service as hosts
from app.jobs import lifecycle
from app.jobs.states import ACTIVE, JobState
from drafting import proc
from drafting.hostinfo import gpus, shm

logger = logging.getLogger("eyas.host")


def report(settings: Settings, *, host: str, worker: str) -> None:
    inventory = gpus.inventory()
    with session_scope(settings) as session:
        hosts.record_heartbeat(
            session,
            name=host,
            worker=worker,
            gpus=inventory.to_dicts(),
            gpu_error=inventory.error,
            shm=shm.scan().to_dict(),
            allowed_roots=[str(r) for r in settings.allowed_roots],
            info={
                "platform": platform.platform(),
                "cpus": psutil.cpu_count(),
                "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            },
        )


def end_orphans(settings: Settings, *, host: str) -> int:
    """End process groups a previous incarnation of this host's worker started and left behind.

    Only groups recorded in the database are touched, and only if their leader is still the very process
    eyas started (same pid and start time), so no other process is ever signalled.
    """
    with session_scope(settings) as session:
        candidates = lifecycle.orphans(session, host=host)
    ended = 0
    for job_id, pgid, create_time, state in candidates:
        if proc.group_alive(pgid, create_time):
            logger.warning("ending orphaned process group %s of job %s (%s)", pgid, job_id, state)
            proc.terminate_group(pgid, grace_s=settings.cancel_grace_s, expected_create_time=create_time)
            ended += 1
        with session_scope(settings) as session:
            if JobState(state) in ACTIVE:
                lifecycle.lose_orphaned(
                    session,
                    settings,
                    job_id=job_id,
                    message=f"its worker on {host} restarted; the orphaned process group {pgid} was ended",
                )
            lifecycle.mark_reaped(session, job_id=job_id)
    return ended


class HostHeartbeat(threading.Thread):
    def __init__(self, settings: Settings, *, host: str, worker: str) -> None:
        super().__init__(name="eyas-host-heartbeat", daemon=True)
        self.settings, self.host, self.worker = settings, host, worker
        self._stop = threading.Event()

    def run(self) -> None:
        while True:
            try:
                report(self.settings, host=self.host, worker=self.worker)
            except Exception as exc:  # noqa: BLE001 - the database may be restarting: beat again next period
                logger.warning("host heartbeat failed: %s", exc)
            if self._stop.wait(self.settings.heartbeat_s):
                return

    def stop(self) -> None:
        self._stop.set()
