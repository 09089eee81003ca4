"""Waiting for a job to end without holding a database session or blocking the event loop."""

from __future__ import annotations

import asyncio
import time
import uuid

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs import service
from app.jobs.schemas import JobRead


async def wait_terminal(settings: Settings, job_id: uuid.UUID, timeout: float, request: Request) -> JobRead:
    """The job once it is terminal, or as it is when `timeout` seconds have passed or the client left."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        job = await run_in_threadpool(_read_job, settings, job_id)
        if job.terminal or time.monotonic() >= deadline or await request.is_disconnected():
            return job
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, 1.0)


def _read_job(settings: Settings, job_id: uuid.UUID) -> JobRead:
    with session_scope(settings) as session:
        return JobRead.of(service.get_job(session, job_id))
