"""Every listing pages the same way: `{items, next_cursor}`, newest first, each row once across the pages
(rows sharing a timestamp too), the last page's next_cursor null, and a cursor the API did not hand out a
422 that names it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.core.db import session_scope
from app.models.artifact import Artifact
from app.models.benchmark import BenchmarkResult
from app.models.pipeline import Pipeline
from app.models.server import Server
from tests.app.test_jobs_api import register_host, submit

Headers = dict[str, str]
ROWS = 5
# Three rows share one instant: the cursor must still tell them apart (by id).
TIMES = [datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=s) for s in (0, 1, 1, 1, 2)]


def make_rows(client: TestClient, admin: Headers, settings: Settings) -> dict[str, list[uuid.UUID]]:
    """ROWS rows in each listing's table (and the jobs they hang from), with known times."""
    register_host(settings, "gpu-a")
    jobs = [uuid.UUID(str(submit(client, admin)["id"])) for _ in range(ROWS)]
    made: dict[str, list[uuid.UUID]] = {"pipelines": [], "artifacts": [], "benchmarks": [], "servers": []}
    with session_scope(settings) as session:
        for job_id, at in zip(jobs, TIMES, strict=True):
            rows: dict[str, Any] = {
                "pipelines": Pipeline(template="eagle3", spec={}, retries=0, created_at=at),
                "artifacts": Artifact(job_id=job_id, kind="hidden_states", path="/x", created_at=at),
                "benchmarks": BenchmarkResult(job_id=job_id, summary={}, created_at=at),
                "servers": Server(job_id=job_id, started_at=at),
            }
            for name, row in rows.items():
                session.add(row)
                session.flush()
                made[name].append(row.id)
    return made


def walk(client: TestClient, admin: Headers, url: str, limit: int) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(ROWS + 2):
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        answer = client.get(url, params=params, headers=admin)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert set(page) == {"items", "next_cursor"}, page
        assert len(page["items"]) <= limit
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError(f"{url} never ended its pages: {seen}")


@pytest.mark.parametrize("name", ["pipelines", "artifacts", "benchmarks", "servers"])
def test_every_listing_pages_with_a_cursor(
    client: TestClient, admin: Headers, settings: Settings, name: str
) -> None:
    made = make_rows(client, admin, settings)[name]
    newest_first = [
        str(row_id)
        for _, row_id in sorted(zip(TIMES, made, strict=True), key=lambda t: (t[0], t[1]), reverse=True)
    ]
    for limit in (1, 2, ROWS, ROWS + 1):
        assert walk(client, admin, f"/v1/{name}", limit) == newest_first, limit
    refused = client.get(f"/v1/{name}", params={"cursor": "not-one-of-ours"}, headers=admin)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "cursor" in refused.json()["detail"]


def test_jobs_page_the_same_way(client: TestClient, admin: Headers, settings: Settings) -> None:
    make_rows(client, admin, settings)
    whole = [job["id"] for job in client.get("/v1/jobs", headers=admin).json()["items"]]
    assert len(whole) == ROWS
    assert walk(client, admin, "/v1/jobs", 2) == whole
