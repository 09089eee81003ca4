"""Rendering a launch: a dry-run `launch` job on the host, so every check (SGLang's own parser there, the
draft doctor, paths, port, /dev/shm, GPUs) runs where the server would, and nothing starts."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import session_scope
from app.core.security import Principal
from app.jobs import service as jobs
from app.jobs.schemas import JobCreate, JobRead
from app.jobs.waiting import wait_terminal
from app.launch.schemas import RenderRequest, RenderResult
from app.models.job import Job


async def render(
    settings: Settings, *, body: RenderRequest, principal: Principal, request: Request
) -> RenderResult:
    """Submit the dry run, wait (up to body.timeout) for the host to check it, and report what it found.

    The dry run is its own short transaction, committed before the wait: the worker must see the job's row,
    and no session is held while it runs (the wait reads in short sessions of its own)."""

    def submit() -> uuid.UUID:
        with session_scope(settings) as session:
            return submit_dry_run(session, settings, body=body, principal=principal).id

    job_id = await run_in_threadpool(submit)
    return result_of(await wait_terminal(settings, job_id, body.timeout, request))


def submit_dry_run(session: Session, settings: Settings, *, body: RenderRequest, principal: Principal) -> Job:
    """A launch job with dry_run set; it holds no GPUs (it only checks them)."""
    spec = JobCreate(
        kind="launch", params={**body.spec, "dry_run": True}, host=body.host, gpus=0, timeout_s=300
    )
    job, _ = jobs.submit_job(session, settings, spec=spec, principal=principal)
    return job


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
