"""Live log follow: one feed per followed job per API process, shared by all its followers.

A feed fetches new lines once per batch (woken by Redis pub/sub in production, or polling the database at a
short interval in embedded mode) and keeps recent lines in memory; followers read from it. So many followers
of one job cost the database about one query per batch, not one per follower. A follower that starts behind
the feed's window catches up with its own paged reads first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis
from fastapi.concurrency import run_in_threadpool

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs import service as jobs
from app.jobs.states import TERMINAL
from app.logs import repository
from app.logs.notify import channel
from app.logs.schemas import LogLineRead

logger = logging.getLogger("eyas.logs.follow")
WINDOW_LINES = 20_000
FETCH_LIMIT = 2_000
IDLE_FEED_S = 30.0


@dataclass(frozen=True)
class FollowEnd:
    state: str
    last_seq: int


class _Feed:
    def __init__(self, hub: LogHub, job_id: uuid.UUID) -> None:
        self.hub = hub
        self.job_id = job_id
        self.lines: deque[LogLineRead] = deque(maxlen=WINDOW_LINES)
        self.last_seq = -1  # -1: not loaded yet
        self.end: FollowEnd | None = None
        self.followers = 0
        self.changed = asyncio.Event()
        self.wake = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    def window_start(self) -> int:
        return self.lines[0].seq - 1 if self.lines else self.last_seq

    def after(self, cursor: int) -> list[LogLineRead]:
        return [line for line in self.lines if line.seq > cursor]

    async def _run(self) -> None:
        idle_since: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self._fetch()
            except Exception as exc:  # noqa: BLE001 - database restarting: keep followers waiting, try again
                logger.warning("log feed %s: %s", self.job_id, exc)
            if self.followers == 0:
                idle_since = idle_since or loop.time()
                if loop.time() - idle_since > IDLE_FEED_S or self.end is not None:
                    self.hub.drop(self.job_id)
                    return
            else:
                idle_since = None
            if self.end is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.hub.poll_interval_s)
                self.wake.clear()
            else:
                await asyncio.sleep(self.hub.poll_interval_s)

    async def _fetch(self) -> None:
        if self.last_seq < 0:
            # Fill the window with the job's last WINDOW_LINES lines, so followers starting from the
            # beginning of a log that fits read from memory, not each from the database.
            _, _, log_seq = await run_in_threadpool(self.hub.fetch, self.job_id, None)
            self.last_seq = max(0, log_seq - WINDOW_LINES)
        grew = False
        while True:
            fetched, state, log_seq = await run_in_threadpool(self.hub.fetch, self.job_id, self.last_seq)
            for line in fetched:
                self.lines.append(line)
                self.last_seq = line.seq
            grew = grew or bool(fetched)
            if len(fetched) < FETCH_LIMIT:
                break
        if state in TERMINAL and self.last_seq >= log_seq:
            self.end = FollowEnd(state, self.last_seq)
        if grew or self.end is not None:
            self.changed.set()
            self.changed = asyncio.Event()


class LogHub:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.redis_url = settings.resolved_redis_url()
        self.poll_interval_s = 1.0 if self.redis_url else 0.1
        self.feeds: dict[uuid.UUID, _Feed] = {}
        self._listener: asyncio.Task[None] | None = None

    def fetch(self, job_id: uuid.UUID, after_seq: int | None) -> tuple[list[LogLineRead], str, int]:
        """Lines after `after_seq` (none when it is None), the job's state and its last stored seq."""
        with session_scope(self.settings) as session:
            job = jobs.get_job(session, job_id)
            if after_seq is None:
                return [], job.state, job.log_seq
            rows = repository.page(session, job_id, after_seq=after_seq, limit=FETCH_LIMIT)
            return [LogLineRead.model_validate(r) for r in rows], job.state, job.log_seq

    def drop(self, job_id: uuid.UUID) -> None:
        self.feeds.pop(job_id, None)

    def _feed(self, job_id: uuid.UUID) -> _Feed:
        if self.redis_url and self._listener is None:
            self._listener = asyncio.create_task(self._listen())
        feed = self.feeds.get(job_id)
        if feed is None:
            feed = self.feeds[job_id] = _Feed(self, job_id)
        return feed

    async def _listen(self) -> None:
        """One pub/sub connection per API process wakes the feed of whichever job got a batch."""
        assert self.redis_url is not None
        pattern = channel(self.settings, "*")
        prefix_len = len(pattern) - 1
        while True:
            try:
                client = aioredis.Redis.from_url(self.redis_url)
                async with client.pubsub() as pubsub:
                    await pubsub.psubscribe(pattern)
                    async for message in pubsub.listen():
                        if message.get("type") != "pmessage":
                            continue
                        name = message["channel"].decode()[prefix_len:]
                        with contextlib.suppress(ValueError):
                            feed = self.feeds.get(uuid.UUID(name))
                            if feed is not None:
                                feed.wake.set()
            except Exception as exc:  # noqa: BLE001 - Redis restarting: feeds keep polling meanwhile
                logger.warning("log pub/sub listener: %s; reconnecting", exc)
                await asyncio.sleep(1.0)

    async def follow(
        self, job_id: uuid.UUID, cursor: int
    ) -> AsyncIterator[list[LogLineRead] | FollowEnd | None]:
        """Yields batches of lines after `cursor`, None as a keep-alive, and a final FollowEnd."""
        feed = self._feed(job_id)
        feed.followers += 1
        try:
            while True:
                changed = feed.changed  # taken before reading, so no batch can slip between read and wait
                if feed.last_seq >= 0 and cursor < feed.window_start():
                    lines, _, _ = await run_in_threadpool(self.fetch, job_id, cursor)
                else:
                    lines = feed.after(cursor) if feed.last_seq >= 0 else []
                if lines:
                    cursor = lines[-1].seq
                    yield lines
                    continue
                if feed.end is not None and cursor >= feed.end.last_seq:
                    yield feed.end
                    return
                try:
                    await asyncio.wait_for(changed.wait(), 15.0)
                except TimeoutError:
                    yield None
                if feed.task.done() and job_id not in self.feeds:
                    feed = self._feed(job_id)
        finally:
            feed.followers -= 1
