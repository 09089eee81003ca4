"""The worker's Celery app: one queue per host (`host.<name>`) plus `control`; tasks are thin."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass

from celery import Celery

from app.core.config import Settings
from app.core.queue import TaskName, control_queue, host_queue, make_celery
from app.recorders import register_result_recorders
from workers.runner import JobRunner

logger = logging.getLogger("eyas.worker")


@dataclass
class WorkerRuntime:
    settings: Settings
    host: str
    worker: str
    runner: JobRunner


_runtime: WorkerRuntime | None = None


def runtime() -> WorkerRuntime:
    if _runtime is None:
        raise RuntimeError("the eyas worker runtime is not configured (start it with `eyas worker`)")
    return _runtime


def build(settings: Settings, host: str) -> Celery:
    """Create the worker's Celery app and register its tasks."""
    global _runtime
    register_result_recorders()
    worker = f"{host}@{socket.gethostname()}:{os.getpid()}"
    _runtime = WorkerRuntime(settings, host, worker, JobRunner(settings, host=host, worker=worker))
    if not settings.broker_url:
        _fast_sqlalchemy_polling()
    app = make_celery(settings, name=f"eyas-worker-{host}")

    @app.task(name=TaskName.RUN_JOB, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def run_job(job_id: str) -> None:
        runtime().runner.run(uuid.UUID(job_id))

    return app


def queues(settings: Settings, host: str) -> list[str]:
    return [host_queue(settings, host), control_queue(settings)]


def _fast_sqlalchemy_polling() -> None:
    # kombu's SQLAlchemy transport polls once a second and forwards transport options to create_engine
    # (a TypeError), so the interval can only be set on the class (see reference/install-notes.md §5).
    import kombu.transport.sqlalchemy as kombu_sqla

    kombu_sqla.Transport.polling_interval = 0.05
