"""The claim is one statement (UPDATE … RETURNING and its event's INSERT in one WITH), and so is `running`;
in the worker both commit by themselves (no BEGIN, no COMMIT); a second claimer of the same job, racing or
late, gets nothing."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, select

from app.core.config import Settings
from app.core.db import autocommit_scope, get_engine, session_factory, session_scope
from app.jobs import lifecycle
from app.jobs.states import JobState
from app.models.base import Base, utcnow
from app.models.job import Job, JobEvent
from tests.app.test_jobs_api import register_if_new

Headers = dict[str, str]


def submit(client: TestClient, headers: Headers, host: str = "claim-host") -> uuid.UUID:
    register_if_new(client.app.state.settings, host)  # type: ignore[attr-defined]
    body = {"kind": "selftest", "host": host, "params": {"lines": 0}}
    response = client.post("/v1/jobs", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return uuid.UUID(response.json()["id"])


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement.split(None, 1)[0].upper())

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def claim_then_run(settings: Settings, job_id: uuid.UUID, host: str) -> tuple[list[str], list[str]]:
    """What the runner's fast path sends: the claim, then (its process accepted) `running` and the commit."""
    engine = get_engine(settings)
    session = session_factory(settings)()
    try:
        with statements(engine) as claim:
            claimed = lifecycle.claim(session, job_id=job_id, host=host, worker="w1")
        assert claimed is not None
        assert (claimed.attempt, claimed.kind, claimed.log_seq, claimed.params["lines"]) == (
            1,
            "selftest",
            0,
            0,
        )
        with statements(engine) as running:
            assert lifecycle.mark_running(session, job_id=job_id, pid=123, pgid=123, create_time=1.5)
            session.commit()
    finally:
        session.close()
    return claim, running


def assert_claimed_and_running(settings: Settings, job_id: uuid.UUID) -> None:
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.state, job.attempt, job.worker, job.pid, job.pgid) == ("running", 1, "w1", 123, 123)
        assert job.started_at is not None
        assert job.running_at is not None
        assert job.heartbeat_at is not None
        moves = session.execute(
            select(JobEvent.from_state, JobEvent.to_state)
            .where(JobEvent.job_id == job_id)
            .order_by(JobEvent.id)
        ).all()
        assert [tuple(m) for m in moves][-2:] == [("queued", "starting"), ("starting", "running")]


def test_the_claim_is_one_statement_and_running_one_on_postgres(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    job_id = submit(client, admin)
    claim, running = claim_then_run(settings, job_id, "claim-host")
    assert claim == ["WITH"]  # UPDATE … RETURNING, and the claim's event from what it returned
    assert running == ["WITH"]  # `running` with the process, and its event
    assert_claimed_and_running(settings, job_id)


def test_in_the_worker_each_commits_by_itself(client: TestClient, admin: Headers, settings: Settings) -> None:
    """autocommit_scope: no transaction is left open after the statement (no COMMIT round trip to come), and
    another connection sees the claim before the session ends."""
    job_id = submit(client, admin)
    with autocommit_scope(settings) as session:
        assert lifecycle.claim(session, job_id=job_id, host="claim-host", worker="w1") is not None
        dbapi = session.connection().connection.dbapi_connection
        assert dbapi is not None
        assert dbapi.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with session_scope(settings) as other:
            assert other.execute(select(Job.state).where(Job.id == job_id)).scalar_one() == "starting"
        assert lifecycle.mark_running(session, job_id=job_id, pid=123, pgid=123, create_time=1.5)
        assert dbapi.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert_claimed_and_running(settings, job_id)


def test_a_job_claimed_already_or_of_another_host_is_not_claimed(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    job_id = submit(client, admin)
    with session_scope(settings) as session:
        assert lifecycle.claim(session, job_id=job_id, host="other-host", worker="w2") is None
        assert lifecycle.claim(session, job_id=uuid.uuid4(), host="claim-host", worker="w2") is None
    with session_scope(settings) as session:
        assert lifecycle.claim(session, job_id=job_id, host="claim-host", worker="w1") is not None
    with session_scope(settings) as session:
        assert lifecycle.claim(session, job_id=job_id, host="claim-host", worker="w2") is None
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.state, job.worker, job.attempt) == (JobState.STARTING, "w1", 1)


def test_a_racing_second_claimer_waits_for_the_first_and_gets_nothing(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    job_id = submit(client, admin)
    first = session_factory(settings)()
    assert lifecycle.claim(first, job_id=job_id, host="claim-host", worker="w1") is not None
    second: list[object] = []

    def claim_second() -> None:
        with session_scope(settings) as session:
            second.append(lifecycle.claim(session, job_id=job_id, host="claim-host", worker="w2"))

    racer = threading.Thread(target=claim_second)
    racer.start()
    racer.join(0.5)
    assert racer.is_alive()  # it waits on the first claim's row lock …
    first.commit()
    first.close()
    racer.join(10)
    assert second == [None]  # … then finds the job no longer queued
    with session_scope(settings) as session:
        events = session.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.to_state == "starting")
        )
        assert len(list(events)) == 1


def test_running_after_a_cancel_records_the_process_only(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    job_id = submit(client, admin)
    with session_scope(settings) as session:
        assert lifecycle.claim(session, job_id=job_id, host="claim-host", worker="w1") is not None
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=admin).status_code < 300
    with session_scope(settings) as session:
        assert lifecycle.mark_running(session, job_id=job_id, pid=7, pgid=7, create_time=None)
        assert not lifecycle.mark_running(session, job_id=uuid.uuid4(), pid=7, pgid=7, create_time=None)
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state != JobState.RUNNING
        assert (job.pid, job.pgid) == (7, 7)


def test_the_same_path_on_sqlite(settings: Settings, tmp_path: Path) -> None:
    embedded = settings.model_copy(update={"database_url": f"sqlite:///{tmp_path / 'eyas.db'}"})
    Base.metadata.create_all(get_engine(embedded))
    job_id = uuid.uuid4()
    with session_scope(embedded) as session:
        now = utcnow()
        session.add(
            Job(
                id=job_id,
                kind="selftest",
                params={"lines": 0},
                state="queued",
                host="h",
                created_at=now,
                updated_at=now,
                queued_at=now,
                log_seq=4,
            )
        )
    claim, running = claim_then_run_sqlite(embedded, job_id)
    assert [s for s in claim if s != "BEGIN"] == ["UPDATE"]
    assert running[0] == "UPDATE"
    assert set(running[1:]) == {"INSERT"}
    assert_claimed_and_running(embedded, job_id)
    with session_scope(embedded) as session:
        assert lifecycle.claim(session, job_id=job_id, host="h", worker="w2") is None


def claim_then_run_sqlite(settings: Settings, job_id: uuid.UUID) -> tuple[list[str], list[str]]:
    engine = get_engine(settings)
    session = session_factory(settings)()
    try:
        with statements(engine) as claim:
            claimed = lifecycle.claim(session, job_id=job_id, host="h", worker="w1")
        assert claimed is not None
        assert (claimed.attempt, claimed.log_seq) == (1, 4)
        with statements(engine) as running:
            assert lifecycle.mark_running(session, job_id=job_id, pid=123, pgid=123, create_time=1.5)
            session.commit()
    finally:
        session.close()
    return claim, running
