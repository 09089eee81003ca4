"""Rendering a launch: a dry-run `launch` job on the host, so every check (SGLang's own parser there, the
draft doctor, paths, port, /dev/shm, GPUs) runs where the server would, and nothing starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import session_scope
from app.core.errors import AppError
from app.core.security import Principal
from app.hosts import service as hosts
from app.jobs import service as jobs
from app.jobs import waiting
from app.jobs.schemas import JobCreate, JobRead
from app.launch.schemas import RenderRequest, RenderResult


async def render(
    session: Session,
    settings: Settings,
    *,
    body: RenderRequest,
    principal: Principal,
    hand_over: Callable[[], None],
    request: Request,
) -> RenderResult:
    """Submit the dry run in the request's session, wait (up to body.timeout) for the host to check it, and
    report what it found. `hand_over` commits the request's transaction before the wait (see
    app/jobs/waiting.py: submit_and_wait): the worker must see the job's row."""
    job = await waiting.submit_and_wait(
        session,
        settings,
        spec=dry_run_spec(body),
        principal=principal,
        hand_over=hand_over,
        timeout=body.timeout,
        request=request,
    )
    if job.terminal:
        return result_of(job)
    return await run_in_threadpool(_withdraw, settings, job, body.timeout)


def _withdraw(settings: Settings, job: JobRead, waited_s: float) -> RenderResult:
    """A dry run its host did not check within the wait is cancelled: nobody reads its answer later, and
    hidden from listings it would otherwise wait for a worker that may never come. The answer names the
    host and whether its worker is offline."""
    with session_scope(settings) as session:
        try:
            current = JobRead.of(jobs.request_cancel(session, job_id=job.id))
        except AppError:  # it ended just now: its own answer stands
            return result_of(JobRead.of(jobs.get_job(session, job.id)))
        known = hosts.find_host(session, job.host) if job.host else None
        why = (
            "its worker is offline" if known is None or not hosts.is_online(known, settings) else "it is busy"
        )
    result = result_of(current)
    result.message = (
        f"host {job.host!r} did not check the launch within {waited_s:g} s ({why}); the dry run was withdrawn"
    )
    return result


def dry_run_spec(body: RenderRequest) -> JobCreate:
    """A launch job with dry_run set; it holds no GPUs (it only checks them)."""
    return JobCreate(
        kind="launch", params={**body.spec, "dry_run": True}, host=body.host, gpus=0, timeout_s=300
    )


def result_of(job: JobRead) -> RenderResult:
    payload: dict[str, Any] = job.result or {}
    return RenderResult(
        job_id=job.id,
        state=job.state,
        ok=job.state == "succeeded",
        argv=payload.get("argv"),
        env=payload.get("env"),
        engine=payload.get("engine"),
        findings=list(payload.get("findings") or []),
        message=job.message if job.state != "succeeded" else None,
    )
