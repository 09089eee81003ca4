"""The API's side of Celery: a client app that sends tasks by name, only after the job's row is committed.

`app` never imports `workers`: tasks are addressed by their names (TaskName) and queues by convention.
"""

from __future__ import annotations

import logging
import time
from enum import StrEnum
from typing import Any

from celery import Celery
from kombu.transport import redis as kombu_redis
from sqlalchemy import event
from sqlalchemy.orm import Session

from app.core.config import Settings, get_settings

logger = logging.getLogger("eyas.queue")


class TaskName(StrEnum):
    RUN_JOB = "eyas.jobs.run"


def host_queue(settings: Settings, host: str) -> str:
    return f"{settings.queue_prefix}host.{host}"


def control_queue(settings: Settings) -> str:
    return f"{settings.queue_prefix}control"


def make_celery(settings: Settings, name: str = "eyas") -> Celery:
    app = Celery(name, broker=settings.resolved_broker_url())
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # ack_emulation off: with it, kombu's Redis transport crashed the worker on a Redis restart
        # (tests/reliability). Messages are then acked on delivery; a lost one is re-sent from the database.
        broker_transport_options={"visibility_timeout": 3600, "ack_emulation": False}
        if settings.broker_url
        else {},
        broker_connection_timeout=1.0,
        task_default_queue=control_queue(settings),
        worker_hijack_root_logger=False,
        broker_pool_limit=10,
    )
    return app


_clients: dict[tuple[str, str], Celery] = {}


def client(settings: Settings | None = None) -> Celery:
    """The sending app for these settings (one per broker URL and queue prefix, made once)."""
    settings = settings or get_settings()
    key = (settings.resolved_broker_url(), settings.queue_prefix)
    app = _clients.get(key)
    if app is None:
        app = _clients[key] = make_celery(settings, name="eyas-client")
        if key[0].split("://", 1)[0] in ("redis", "rediss"):
            app.conf.broker_transport = f"{__name__}:RedisTransport"
    return app


class _RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, sending with one Redis client it keeps: kombu makes a new `redis.Redis` for
    every message it sends (~0.2 ms of building its response callbacks, on the path from a job's commit to
    its worker). The client shares the channel's connection pool, as kombu's own do; a channel is used by one
    producer at a time (Celery's producer pool), and a Redis client is safe across threads anyway."""

    _sender: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        # kombu's Channel._create_client has no annotations
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        if self._sender is None:
            self._sender = super()._create_client()  # type: ignore[no-untyped-call]
        return self._sender


class RedisTransport(kombu_redis.Transport):
    """The Redis transport of the API's sending app (`client`): kombu's, with _RedisChannel."""

    Channel = _RedisChannel


_BREAKER_OPEN_S = 5.0
_broker_down_until = 0.0


def send_job(settings: Settings, job_id: str, host: str) -> bool:
    """Send a run message; False when the broker is unreachable (the reconciler sends it later).

    After a failed send, sends are skipped for a few seconds so requests do not each wait on a dead broker.
    """
    global _broker_down_until
    if time.monotonic() < _broker_down_until:
        return False
    try:
        client(settings).send_task(
            TaskName.RUN_JOB,
            kwargs={"job_id": job_id},
            queue=host_queue(settings, host),
            expires=settings.task_expires_s,
            retry=False,
        )
        return True
    except Exception as exc:  # noqa: BLE001 - any broker failure: the database stays the record
        logger.warning("could not send job %s to %s: %s", job_id, host, exc)
        _broker_down_until = time.monotonic() + _BREAKER_OPEN_S
        return False


def enqueue_after_commit(session: Session, settings: Settings, job_id: str, host: str) -> None:
    """Send the job's message once the surrounding transaction commits; a rollback drops it."""

    def _send(_session: Session) -> None:
        send_job(settings, job_id, host)

    event.listen(session, "after_commit", _send, once=True)


def broker_reachable(settings: Settings) -> tuple[bool, str]:
    try:
        with client(settings).connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True, "ok"
    except Exception as exc:  # noqa: BLE001 - a readiness probe reports any failure, it never raises
        return False, str(exc)
