"""Result recorders by job kind: the finishing path hands a result to the domain that keeps it."""

from __future__ import annotations

import subprocess
import sys
import uuid

from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs.lifecycle import Outcome, finish
from app.jobs.states import JobState
from tests.app.test_jobs_api import submit
from tests.conftest import ROOT


def finish_as(settings: Settings, job_id: str, kind: str, result: dict[str, object]) -> None:
    with session_scope(settings) as session:
        session.execute(
            text("UPDATE job SET state='running', kind=:kind WHERE id=:id"), {"kind": kind, "id": job_id}
        )
    with session_scope(settings) as session:
        finish(
            session,
            settings,
            job_id=uuid.UUID(job_id),
            outcome=Outcome(JobState.FAILED, "RELEASE_GATE_FAILED", result=result),
        )


def test_only_a_benchmark_result_with_rows_becomes_a_table_whatever_the_end_state(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    rows = [{"depth": None, "speedup": 1.0}]
    finish_as(settings, str(submit(client, admin)["id"]), "eval", {"rows": rows})
    finish_as(settings, str(submit(client, admin)["id"]), "benchmark", {"mode": "single"})
    assert client.get("/v1/benchmarks", headers=admin).json()["items"] == []
    gated = str(submit(client, admin)["id"])
    finish_as(settings, gated, "benchmark", {"rows": rows, "gate": {"deployable": False}})
    listed = client.get("/v1/benchmarks", headers=admin).json()["items"]
    assert [(b["job_id"], b["deployable"]) for b in listed] == [(gated, False)]


PROBE = """
from app.jobs import results
import {module}
print("before:", results.recorder_for("benchmark"))
{start}
print("after:", results.recorder_for("benchmark"))
"""


def probe(module: str, start: str) -> str:
    code = PROBE.format(module=module, start=start)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_the_worker_process_registers_the_benchmark_recorder_at_start_up() -> None:
    """The worker is what calls finish in production; building it (as `eyas worker` does) registers the
    benchmarks recorder, explicitly: importing the runtime alone registers nothing."""
    out = probe("workers.celery_app", "workers.celery_app.build(workers.celery_app.Settings(), 'probe')")
    assert "before: None" in out
    assert "after: <function record_benchmark_job" in out


def test_the_api_registers_the_benchmark_recorder_at_start_up() -> None:
    out = probe("app.main", "app.main.create_app()")
    assert "before: None" in out
    assert "after: <function record_benchmark_job" in out
