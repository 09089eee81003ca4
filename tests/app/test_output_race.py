"""Two jobs that declare the same output, sent at the same moment to a live API process (real PostgreSQL):
the path rules judge them one after the other, so one is stored and the other is a 422 naming it. Without
holding the host, both read the jobs that had not ended before either was stored, and both were queued."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.core.config import Settings
from app.core.security import Scope
from tests.app.sent_together import sent_together
from tests.app.test_jobs_api import register_host
from tests.conftest import make_token

ROUNDS = 6  # the race is real each round; a lucky ordering would pass one alone


def test_two_jobs_with_one_output_sent_at_once_store_one(api_server: str, settings: Settings) -> None:
    root: Path = settings.allowed_roots[0]
    register_host(settings, "gpu-a", roots=[str(root)])
    token = make_token(settings, Scope.ADMIN)
    for round_ in range(ROUNDS):
        dest = root / f"race-{round_}" / "sglang"
        body = {"kind": "fix_keys", "host": "gpu-a", "params": {"source": str(root / "d"), "dest": str(dest)}}
        answers = sent_together(api_server, token, "/v1/jobs", body)
        assert sorted(a.status_code for a in answers) == [201, 422], [a.text for a in answers]
        refused = next(a.json() for a in answers if a.status_code == 422)
        assert refused["code"] == "PATH_NOT_ALLOWED"
        stored = next(a.json() for a in answers if a.status_code == 201)
        assert refused["other_job"] == stored["id"]
        with httpx.Client(base_url=api_server, headers={"Authorization": f"Bearer {token}"}) as http:
            listed = http.get("/v1/jobs", params={"kind": "fix_keys", "limit": 100}).json()["items"]
        assert [j["id"] for j in listed if j["params"]["dest"] == str(dest)] == [stored["id"]]
