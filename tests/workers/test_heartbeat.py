"""A job is heartbeaten from its claim, before its process has it (a slow hand-over must not let a reaper take
it for lost), on a kept thread of its own (workers/kept_threads.py)."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.config import Settings
from app.core.db import session_scope
from app.models.job import Job
from tests.app.test_jobs_api import register_host
from testsupport.timing import eventually, throughout
from workers.kept_threads import KeptThreads
from workers.runner import JobRunner

Headers = dict[str, str]


def heartbeat_at(settings: Settings, job_id: uuid.UUID) -> datetime:
    with session_scope(settings) as session:
        stamp = session.execute(select(Job.heartbeat_at).where(Job.id == job_id)).scalar_one()
    assert stamp is not None
    return stamp


def test_a_claimed_job_is_heartbeaten_before_its_process_has_it(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    register_host(settings, "beat-host")
    body = {"kind": "selftest", "host": "beat-host", "params": {"lines": 0}}
    job_id = uuid.UUID(client.post("/v1/jobs", json=body, headers=admin).json()["id"])
    runner = JobRunner(settings, host="beat-host", worker="w1")
    job = runner._claim(job_id)
    assert job is not None
    claimed_beat = heartbeat_at(settings, job_id)
    with runner._holding(job):  # claimed and held, nothing handed over yet
        eventually(
            lambda: heartbeat_at(settings, job_id) > claimed_beat,
            within_s=settings.heartbeat_s * 3,
            what="a beat while the job is held",
        )
    last = heartbeat_at(settings, job_id)
    # released: no more beats, for two beat periods (a beat due then would have come by their end)
    throughout(
        lambda: heartbeat_at(settings, job_id) == last,
        for_s=settings.heartbeat_s * 2,
        what="no beat after the job is released",
    )


def test_each_piece_of_work_has_a_thread_of_its_own_and_idle_threads_are_kept() -> None:
    threads = KeptThreads("test-kept")
    release = threading.Event()
    running: list[str] = []
    lock = threading.Lock()

    def hold() -> None:
        with lock:
            running.append(threading.current_thread().name)
        release.wait(10)

    for _ in range(3):
        threads.run(hold)
    deadline = time.monotonic() + 10
    while len(running) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(set(running)) == 3  # all three at once, each on its own thread
    release.set()
    deadline = time.monotonic() + 10
    while threads._idle < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    done = threading.Event()
    names: list[str] = []

    def fail() -> None:
        raise RuntimeError("one piece of work failing")

    def note() -> None:
        names.append(threading.current_thread().name)
        done.set()

    threads.run(fail)
    threads.run(note)
    assert done.wait(10)
    assert names[0] in running  # an idle kept thread took it: none was started
    assert threads._count == 3
