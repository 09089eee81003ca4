"""No ping on a connection used a moment ago: one the database dropped since fails once, the pool then
reconnects, and the worker's claim is tried once more on a fresh connection; an idle one is pinged first."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from app.core import db
from app.core.config import Settings
from app.core.db import session_factory, session_scope
from tests.app.test_jobs_api import register_host
from workers.runner import JobRunner

Headers = dict[str, str]


def drop_pooled_connection(settings: Settings) -> None:
    """The pool's most recent connection is ended by the server, as a restart would."""
    with session_scope(settings) as session:
        pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
    outside = create_engine(settings.resolved_database_url(), poolclass=NullPool)
    try:
        with outside.connect() as other:
            assert other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    finally:
        outside.dispose()


def test_a_connection_dropped_a_moment_ago_fails_once_then_the_pool_reconnects(settings: Settings) -> None:
    drop_pooled_connection(settings)
    with pytest.raises(OperationalError) as failed, session_scope(settings) as session:
        session.execute(text("SELECT 1"))
    assert failed.value.connection_invalidated
    with session_scope(settings) as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1


def test_an_idle_connection_is_pinged_and_replaced(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)
    drop_pooled_connection(settings)
    with session_scope(settings) as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1


def test_the_claim_is_tried_again_on_a_fresh_connection(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    register_host(settings, "retry-host")
    body = {"kind": "selftest", "host": "retry-host", "params": {"lines": 0}}
    job_id = uuid.UUID(client.post("/v1/jobs", json=body, headers=admin).json()["id"])
    drop_pooled_connection(settings)
    runner = JobRunner(settings, host="retry-host", worker="w1")
    job = runner._claim(job_id)  # one statement that commits by itself
    assert job is not None
    assert (job.id, job.attempt, job.log_seq) == (job_id, 1, 0)
    with session_factory(settings)() as session:
        assert (
            session.execute(text("SELECT state FROM job WHERE id = :id"), {"id": job_id}).scalar_one()
            == "starting"
        )
