"""Waiting for a job to end without holding a database session or blocking the event loop.

Above app/jobs/service.py: it reads jobs through the service in short sessions of its own."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import session_scope
from app.core.security import Principal
from app.jobs import service
from app.jobs.schemas import JobCreate, JobRead


async def submit_and_wait(
    session: Session,
    settings: Settings,
    *,
    spec: JobCreate,
    principal: Principal,
    hand_over: Callable[[], None],
    timeout: float,
    request: Request,
) -> JobRead:
    """Submit a job in the request's session, hand it over, and wait (up to `timeout`) for it to end.

    `hand_over` is the request's unit of work ending its transaction (the router passes the session's commit):
    the worker can only claim a committed row, and the job's message is sent once it commits. The wait then
    reads in short sessions of its own, so no connection is held while the job runs."""

    def submit() -> uuid.UUID:
        job, _ = service.submit_job(session, settings, spec=spec, principal=principal)
        hand_over()
        return job.id

    job_id = await run_in_threadpool(submit)
    return await wait_terminal(settings, job_id, timeout, request)


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
