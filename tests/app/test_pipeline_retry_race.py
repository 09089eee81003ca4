"""A pipeline retry is one transition: of two retries sent at the same moment to a live API process, one
makes the new job set and the other is a 409, the retry count moves by one; and cancel reaches every job
the pipeline owns, not only the latest of each step."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.core.db import session_scope
from app.core.security import Principal, Scope
from app.jobs import service as jobs_service
from app.jobs.schemas import JobCreate
from tests.app.sent_together import sent_together
from tests.app.test_jobs_api import register_host
from tests.app.test_pipelines_api import run_step, spec
from tests.conftest import make_token

Headers = dict[str, str]
ROUNDS = 3


def failed_pipeline(http: httpx.Client, settings: Settings, tmp: Path) -> dict[str, Any]:
    created = http.post("/v1/pipelines", json=spec(str(tmp)))
    assert created.status_code == 201, created.text
    pipeline: dict[str, Any] = created.json()
    run_step(settings, pipeline["jobs"][0]["id"], ok=False)  # extract failed; the later steps end with it
    assert http.get(f"/v1/pipelines/{pipeline['id']}").json()["state"] == "failed"
    return pipeline


def test_two_retries_at_once_make_one_job_set(api_server: str, settings: Settings, tmp_path: Path) -> None:
    register_host(settings, "gpu-a")
    token = make_token(settings, Scope.ADMIN)
    with httpx.Client(base_url=api_server, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        for round_ in range(ROUNDS):  # the race is real each round; a lucky ordering would pass one alone
            pipeline = failed_pipeline(http, settings, tmp_path / str(round_))
            answers = sent_together(api_server, token, f"/v1/pipelines/{pipeline['id']}/retry")
            assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
            lost = next(a for a in answers if a.status_code == 409)
            assert lost.headers["content-type"].startswith("application/problem+json")
            assert lost.json()["code"] == "INVALID_TRANSITION"
            after = http.get(f"/v1/pipelines/{pipeline['id']}").json()
            assert after["retries"] == 1
            owned = http.get("/v1/jobs", params={"pipeline_id": pipeline["id"], "limit": 100}).json()["items"]
            assert len(owned) == 2 * len(pipeline["jobs"]), "one new job set, not two"
            cancelled = http.post(f"/v1/pipelines/{pipeline['id']}/cancel")
            assert cancelled.status_code == 202, cancelled.text
            owned = http.get("/v1/jobs", params={"pipeline_id": pipeline["id"], "limit": 100}).json()["items"]
            assert {job["state"] for job in owned} == {"failed", "cancelled"}


def test_cancel_reaches_jobs_that_are_not_the_latest_of_their_step(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    """A job set left running beside a newer one (as two retries made before retries were one transition)
    is the pipeline's too: cancel ends it."""
    register_host(settings, "gpu-a")
    pipeline = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=admin).json()
    first = pipeline["jobs"][0]
    principal = Principal(token_id="test", name="test", scopes=frozenset({Scope.ADMIN}))
    # A second extract of the same step, newer than the first; into a folder of its own, as submit refuses
    # an output inside another unfinished job's (app/jobs/path_rules.py).
    params = {**first["params"], "output": f"{first['params']['output']}-stray"}
    with session_scope(settings) as session:
        stray, _ = jobs_service.submit_job(
            session,
            settings,
            spec=JobCreate(kind="extract", params=params, host="gpu-a"),
            principal=principal,
            pipeline_id=uuid.UUID(pipeline["id"]),
            pipeline_step="extract",
        )
        stray_id = str(stray.id)
    cancelled = client.post(f"/v1/pipelines/{pipeline['id']}/cancel", headers=admin)
    assert cancelled.status_code == 202, cancelled.text
    for job_id in (first["id"], stray_id):
        assert client.get(f"/v1/jobs/{job_id}", headers=admin).json()["state"] == "cancelled", job_id
