"""Wakes log followers when a batch is stored: Redis pub/sub in production, nothing in embedded mode
(followers there poll the database at a short interval)."""

from __future__ import annotations

import logging
import uuid
from functools import lru_cache

import redis

from app.core.config import Settings

logger = logging.getLogger("eyas.logs")


def channel(settings: Settings, job_id: uuid.UUID | str) -> str:
    return f"{settings.queue_prefix}eyas:logs:{job_id}"


@lru_cache(maxsize=8)
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def publish_log_batch(settings: Settings, job_id: uuid.UUID, last_seq: int) -> None:
    url = settings.resolved_redis_url()
    if url is None:
        return
    try:
        _redis(url).publish(channel(settings, job_id), str(last_seq))
    except redis.RedisError as exc:  # followers fall back to polling; never fail the job for this
        logger.debug("log notify failed: %s", exc)
