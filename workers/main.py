"""`eyas worker`: one Celery worker per GPU host, consuming `host.<name>` and `control`."""

from __future__ import annotations

import logging

from app.core.config import Settings
from app.jobs.maintenance import MaintenanceLoop
from workers import celery_app, host_agent

logger = logging.getLogger("eyas.worker")


def start_worker(settings: Settings, *, host: str, loglevel: str = "INFO") -> None:
    """Run the worker in the foreground until it is stopped (SIGTERM: warm shutdown)."""
    app = celery_app.build(settings, host)
    worker = celery_app.runtime().worker
    ended = host_agent.end_orphans(settings, host=host)
    if ended:
        logger.warning("ended %d orphaned process group(s) left by a previous worker", ended)
    heartbeat = host_agent.HostHeartbeat(settings, host=host, worker=worker)
    heartbeat.start()
    maintenance = MaintenanceLoop(settings)
    maintenance.start()
    try:
        app.worker_main(
            [
                "worker",
                "--queues",
                ",".join(celery_app.queues(settings, host)),
                "--pool",
                "threads",
                "--concurrency",
                str(settings.worker_concurrency),
                "--prefetch-multiplier",
                "1",
                "--hostname",
                f"{host}@%h",
                "--loglevel",
                loglevel,
                "--without-gossip",
                "--without-mingle",
            ]
        )
    finally:
        heartbeat.stop()
        maintenance.stop()
