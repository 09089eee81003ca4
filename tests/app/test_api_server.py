"""Behaviour that only a real uvicorn server shows."""

from __future__ import annotations

import httpx

from app.core.config import Settings
from app.core.security import Scope
from tests.app.test_jobs_api import register_host
from tests.conftest import make_token


def test_a_submitted_job_is_readable_the_moment_its_201_arrives(api_server: str, settings: Settings) -> None:
    # The request's transaction commits before the response is sent (a dependency scoped to the function),
    # so a client, or a worker woken by the message, never races the commit.
    register_host(settings, "gpu-a")
    headers = {"Authorization": f"Bearer {make_token(settings, Scope.SUBMIT)}"}
    with httpx.Client(base_url=api_server, headers=headers) as http:
        for _ in range(30):
            job = http.post("/v1/jobs", json={"kind": "selftest", "host": "gpu-a"})
            assert job.status_code == 201
            assert http.get(f"/v1/jobs/{job.json()['id']}").status_code == 200
