"""`eyas worker`: one Celery worker per GPU host, consuming `host.<name>` and `control`."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from app.core.config import Settings
from app.maintenance.loop import MaintenanceLoop
from drafting import proc
from workers import celery_app, host_agent
from workers.runner import WORKER_STOPPING

logger = logging.getLogger("eyas.worker")


def start_worker(
    settings: Settings, *, host: str, loglevel: str = "INFO", exit_with_pid: int | None = None
) -> None:
    """Run the worker in the foreground until it is stopped (SIGTERM: warm shutdown), or until the process
    `exit_with_pid` ends."""
    if exit_with_pid is not None:
        _watch_parent(exit_with_pid)
    app = celery_app.build(settings, host)
    worker = celery_app.runtime().worker
    ended = host_agent.end_orphans(settings, host=host)
    if ended:
        logger.warning("ended %d orphaned process group(s) left by a previous worker", ended)
    heartbeat = host_agent.HostHeartbeat(settings, host=host, worker=worker)
    heartbeat.start()
    maintenance = MaintenanceLoop(settings)
    maintenance.start()
    stages = celery_app.runtime().runner.stages
    stages.refill()  # the first job's process, started before there is a job
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
        stages.close()
        heartbeat.stop()
        maintenance.stop()


def _watch_parent(pid: int, period_s: float = 1.0) -> None:
    """`eyas up` starts its worker with its own pid: if eyas up dies without stopping it (kill -9, a closed
    terminal), the worker stops its jobs and itself instead of running on with nobody to serve it."""
    started = proc.process_create_time(pid)

    def watch() -> None:
        while proc.process_alive(pid, started):
            time.sleep(period_s)
        reason = f"the process it served (pid {pid}) ended"
        logger.warning("%s: stopping the running jobs and this worker", reason)
        WORKER_STOPPING.stop(reason)
        os.kill(os.getpid(), signal.SIGTERM)  # Celery's warm shutdown: the jobs are ending already

    threading.Thread(target=watch, name="eyas-parent-watch", daemon=True).start()
