"""A job, pipeline or launch render for a host that never registered is a 422 naming the hosts that did,
and nothing is stored (it used to queue forever; the render answered `queued` and hid its job). A host
that registered and is offline takes jobs (they wait for its worker), but a render there answers once its
wait ends, naming the host, and leaves no dry run behind."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.config import Settings
from app.core.db import session_scope
from tests.app.test_jobs_api import register_host
from tests.app.test_pipelines_api import spec as pipeline_spec
from tests.reliability.test_hostile_input import table_counts

Headers = dict[str, str]


def assert_unknown_host(answer: object, *known: str) -> None:
    response = answer  # an httpx.Response
    assert response.status_code == 422, response.text  # type: ignore[attr-defined]
    problem = response.json()  # type: ignore[attr-defined]
    assert problem["code"] == "UNKNOWN_HOST", problem
    assert "'nowhere'" in problem["detail"], problem
    for name in known:
        assert name in problem["detail"], problem
    assert problem["known_hosts"] == list(known), problem


def test_a_host_that_never_registered_is_a_422_naming_the_known_ones(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    register_host(settings, "gpu-b")
    register_host(settings, "gpu-a")
    before = table_counts(settings)
    job = {"kind": "selftest", "host": "nowhere"}
    assert_unknown_host(client.post("/v1/jobs", json=job, headers=admin), "gpu-a", "gpu-b")
    pipeline = pipeline_spec(str(tmp_path)) | {"host": "nowhere"}
    assert_unknown_host(client.post("/v1/pipelines", json=pipeline, headers=admin), "gpu-a", "gpu-b")
    render = {"spec": {"engine": "reference", "model": f"{tmp_path}/m"}, "host": "nowhere", "timeout": 1}
    assert_unknown_host(client.post("/v1/launch/render", json=render, headers=admin), "gpu-a", "gpu-b")
    assert table_counts(settings) == before  # no job, not even a hidden dry run


def test_with_no_host_registered_the_answer_says_so(client: TestClient, admin: Headers) -> None:
    answer = client.post("/v1/jobs", json={"kind": "selftest", "host": "nowhere"}, headers=admin)
    assert_unknown_host(answer)
    assert "no host has registered yet" in answer.json()["detail"]


def offline(settings: Settings, name: str) -> None:
    """The host's last heartbeat, long enough ago that it counts as offline."""
    gone = timedelta(seconds=settings.host_offline_after_s * 10)
    with session_scope(settings) as session:
        session.execute(
            text("UPDATE host SET heartbeat_at = heartbeat_at - :gone WHERE name = :name"),
            {"gone": gone, "name": name},
        )


def test_an_offline_host_takes_jobs_and_a_render_there_ends_by_its_deadline(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    register_host(settings, "gpu-a")
    offline(settings, "gpu-a")
    assert client.get("/v1/hosts/gpu-a", headers=admin).json()["online"] is False
    queued = client.post("/v1/jobs", json={"kind": "selftest", "host": "gpu-a"}, headers=admin)
    assert queued.status_code == 201, queued.text
    assert queued.json()["state"] == "queued"  # its worker runs it when it comes back
    render = {"spec": {"engine": "reference", "model": f"{tmp_path}/m"}, "host": "gpu-a", "timeout": 0.5}
    answer = client.post("/v1/launch/render", json=render, headers=admin)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert (result["ok"], result["state"]) == (False, "cancelled"), result
    assert "host 'gpu-a'" in result["message"], result
    assert "its worker is offline" in result["message"], result
    dry_run = client.get(f"/v1/jobs/{result['job_id']}", headers=admin).json()
    assert dry_run["state"] == "cancelled"  # not left queued for a worker that may never come
