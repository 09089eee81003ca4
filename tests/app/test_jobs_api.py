"""The jobs API contract against a real PostgreSQL (and the real Redis broker for sends)."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.core.db import session_scope
from app.core.security import Scope
from app.hosts import service as hosts
from tests.conftest import make_token


def register_host(
    settings: Settings, name: str = "gpu-a", gpus: int = 0, roots: list[str] | None = None
) -> None:
    with session_scope(settings) as session:
        hosts.record_heartbeat(
            session,
            name=name,
            worker="test",
            shm=None,
            gpu_error=None if gpus else "no NVIDIA driver",
            gpus=[{"index": i, "uuid": f"GPU-{i}", "name": "H200", "processes": []} for i in range(gpus)],
            allowed_roots=roots or [],
        )


def submit(client: TestClient, headers: dict[str, str], **body: object) -> dict[str, object]:
    body.setdefault("kind", "selftest")
    body.setdefault("host", "gpu-a")
    response = client.post("/v1/jobs", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def job_count(client: TestClient, headers: dict[str, str]) -> int:
    return len(client.get("/v1/jobs", params={"limit": 500}, headers=headers).json()["items"])


def test_submit_returns_the_queued_job(client: TestClient, admin: dict[str, str]) -> None:
    job = submit(client, admin, params={"lines": 2})
    assert job["state"] == "queued"
    assert job["params"]["lines"] == 2
    assert job["params"]["exit_code"] == 0  # defaults filled in by the stage's model
    read = client.get(f"/v1/jobs/{job['id']}", headers=admin).json()
    assert read["id"] == job["id"]
    events = client.get(f"/v1/jobs/{job['id']}/events", headers=admin).json()
    assert [e["to_state"] for e in events] == ["queued"]


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"kind": "nope"}, 422, "UNKNOWN_KIND", None),
        ({"kind": "selftest", "params": {"lines": "many"}}, 422, "INVALID_PARAMS", "params.lines"),
        ({"kind": "selftest", "params": {"bogus": 1}}, 422, "INVALID_PARAMS", "params.bogus"),
        (
            {"kind": "selftest", "params": {"marker_file": "/tmp/../etc/passwd"}},
            422,
            "INVALID_PARAMS",
            "params.marker_file",
        ),
        (
            {"kind": "selftest", "params": {"marker_file": "/tmp/x; rm -rf /"}},
            422,
            "INVALID_PARAMS",
            "params.marker_file",
        ),
        (
            {"kind": "selftest", "params": {"marker_file": "relative/path"}},
            422,
            "INVALID_PARAMS",
            "params.marker_file",
        ),
        ({"kind": "selftest", "host": "bad host;name"}, 422, "VALIDATION_FAILED", "body.host"),
        ({"kind": "selftest", "depends_on": [str(uuid.uuid4())]}, 422, "UNKNOWN_DEPENDENCY", None),
        ({"kind": "selftest", "gpus": -1}, 422, "VALIDATION_FAILED", "body.gpus"),
        ({"kind": "selftest", "surprise": True}, 422, "VALIDATION_FAILED", "body.surprise"),
    ],
)
def test_bad_submissions_are_refused_and_store_nothing(
    client: TestClient,
    admin: dict[str, str],
    body: dict[str, object],
    status: int,
    code: str,
    field: str | None,
) -> None:
    before = job_count(client, admin)
    response = client.post("/v1/jobs", json={"host": "gpu-a", **body}, headers=admin)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == code
    if field:
        assert any(e["field"] == field for e in problem["errors"]), problem
    assert job_count(client, admin) == before


def test_malformed_json_and_oversized_bodies(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    bad = client.post("/v1/jobs", content=b"{not json", headers={**admin, "content-type": "application/json"})
    assert bad.status_code == 422
    huge = b'{"kind":"selftest","params":{"x":"' + b"a" * (settings.max_body_bytes + 10) + b'"}}'
    too_big = client.post("/v1/jobs", content=huge, headers={**admin, "content-type": "application/json"})
    assert too_big.status_code == 413
    assert too_big.json()["code"] == "BODY_TOO_LARGE"
    nested = b"[" * 5000 + b"]" * 5000
    deep = client.post("/v1/jobs", content=nested, headers={**admin, "content-type": "application/json"})
    assert deep.status_code == 422
    assert deep.json()["code"] == "VALIDATION_FAILED"
    assert "deeper than" in deep.json()["detail"]
    assert job_count(client, admin) == 0


def test_gpu_job_on_a_host_without_gpus_fails_fast(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    register_host(settings, "cpu-box", gpus=0)
    response = client.post("/v1/jobs", json={"kind": "selftest", "host": "cpu-box", "gpus": 1}, headers=admin)
    assert response.status_code == 409
    assert response.json()["code"] == "NO_HOST_CAN_SATISFY"
    assert "no NVIDIA driver" in response.json()["detail"]
    anywhere = client.post("/v1/jobs", json={"kind": "selftest", "gpus": 2}, headers=admin)
    assert anywhere.status_code == 409


def test_placement_picks_a_host_with_enough_gpus(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    register_host(settings, "small", gpus=1)
    register_host(settings, "big", gpus=8)
    job = client.post("/v1/jobs", json={"kind": "selftest", "gpus": 4}, headers=admin).json()
    assert job["host"] == "big"
    assert job["gpus_requested"] == 4


def test_paths_outside_the_hosts_allowed_roots_are_refused(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    register_host(settings, "locked", roots=["/data/eyas"])
    outside = {"kind": "selftest", "host": "locked", "params": {"marker_file": "/etc/cron.d/x"}}
    response = client.post("/v1/jobs", json=outside, headers=admin)
    assert response.status_code == 422
    assert response.json()["code"] == "PATH_NOT_ALLOWED"
    sibling = {"kind": "selftest", "host": "locked", "params": {"marker_file": "/data/eyas-evil/x"}}
    assert client.post("/v1/jobs", json=sibling, headers=admin).status_code == 422
    inside = {"kind": "selftest", "host": "locked", "params": {"marker_file": "/data/eyas/run/x"}}
    assert client.post("/v1/jobs", json=inside, headers=admin).status_code == 201


def test_auth_scopes(client: TestClient, settings: Settings, reader: dict[str, str]) -> None:
    assert client.get("/v1/jobs").status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer eyas_wrong"}).status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": "Basic abc"}).status_code == 401
    assert client.get("/v1/jobs", headers=reader).status_code == 200
    denied = client.post("/v1/jobs", json={"kind": "selftest", "host": "gpu-a"}, headers=reader)
    assert denied.status_code == 403
    assert denied.json()["code"] == "FORBIDDEN"
    submitter = {"Authorization": f"Bearer {make_token(settings, Scope.SUBMIT)}"}
    assert (
        client.post("/v1/jobs", json={"kind": "selftest", "host": "gpu-a"}, headers=submitter).status_code
        == 201
    )
    assert client.get("/v1/tokens", headers=submitter).status_code == 403
    assert client.get("/healthz").status_code == 200


def test_revoked_token_stops_working_at_once(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    created = client.post("/v1/tokens", json={"name": "ci", "scopes": ["read"]}, headers=admin).json()
    ci = {"Authorization": f"Bearer {created['token']}"}
    assert client.get("/v1/jobs", headers=ci).status_code == 200
    listed = client.get("/v1/tokens", headers=admin).json()
    assert all("token" not in t for t in listed)  # secrets are never listed
    assert client.post(f"/v1/tokens/{created['id']}/revoke", headers=admin).status_code == 200
    assert client.get("/v1/jobs", headers=ci).status_code == 401


def test_idempotency_key(client: TestClient, admin: dict[str, str]) -> None:
    body = {"kind": "selftest", "host": "gpu-a", "params": {"lines": 1}}
    key = {"Idempotency-Key": "build-42"}
    first = client.post("/v1/jobs", json=body, headers={**admin, **key})
    again = client.post("/v1/jobs", json=body, headers={**admin, **key})
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other = client.post("/v1/jobs", json={**body, "params": {"lines": 2}}, headers={**admin, **key})
    assert other.status_code == 422
    assert other.json()["code"] == "IDEMPOTENCY_MISMATCH"
    assert job_count(client, admin) == 1


def test_etag_and_not_modified(client: TestClient, admin: dict[str, str]) -> None:
    job = submit(client, admin)
    first = client.get(f"/v1/jobs/{job['id']}", headers=admin)
    etag = first.headers["etag"]
    assert client.get(f"/v1/jobs/{job['id']}", headers={**admin, "If-None-Match": etag}).status_code == 304
    client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin)
    changed = client.get(f"/v1/jobs/{job['id']}", headers={**admin, "If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["etag"] != etag


def test_cursor_pagination_and_filters(client: TestClient, admin: dict[str, str]) -> None:
    ids = [submit(client, admin)["id"] for _ in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/jobs", params=params, headers=admin).json()
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    assert len(seen) == len(set(seen))
    assert client.get("/v1/jobs", params={"cursor": "garbage"}, headers=admin).status_code == 422
    assert client.get("/v1/jobs", params={"state": "weird"}, headers=admin).status_code == 422
    queued = client.get("/v1/jobs", params={"state": "queued", "kind": "selftest"}, headers=admin).json()
    assert len(queued["items"]) == 7


def test_cancel_queued_then_cancel_again_is_a_conflict(client: TestClient, admin: dict[str, str]) -> None:
    job = submit(client, admin)
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin)
    assert cancelled.status_code == 202
    assert cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["termination_reason"] == "USER_CANCELLED"
    again = client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin)
    assert again.status_code == 409
    assert again.json()["code"] == "INVALID_TRANSITION"


def test_dependencies_wait_and_cancel_cascades(client: TestClient, admin: dict[str, str]) -> None:
    first = submit(client, admin)
    second = submit(client, admin, depends_on=[first["id"]])
    assert second["state"] == "pending"
    client.post(f"/v1/jobs/{first['id']}/cancel", headers=admin)
    cancelled_dep = client.post(
        "/v1/jobs", json={"kind": "selftest", "host": "gpu-a", "depends_on": [first["id"]]}, headers=admin
    )
    assert cancelled_dep.status_code == 422


def test_wait_returns_the_job_when_the_timeout_passes(client: TestClient, admin: dict[str, str]) -> None:
    job = submit(client, admin)
    waited = client.get(f"/v1/jobs/{job['id']}/wait", params={"timeout": 0.3}, headers=admin)
    assert waited.status_code == 200
    assert waited.json()["terminal"] is False
    assert (
        client.get(f"/v1/jobs/{job['id']}/wait", params={"timeout": 9999}, headers=admin).status_code == 422
    )


def test_unknown_and_malformed_ids(client: TestClient, admin: dict[str, str]) -> None:
    missing = client.get(f"/v1/jobs/{uuid.uuid4()}", headers=admin)
    assert missing.status_code == 404
    assert missing.json()["code"] == "NOT_FOUND"
    assert client.get("/v1/jobs/not-a-uuid", headers=admin).status_code == 422
    assert client.get("/v1/jobs/..%2F..%2Fetc", headers=admin).status_code in (404, 422)
    assert client.get("/v1/hosts/no;such", headers=admin).status_code == 422
    assert client.get("/v1/hosts/nosuch", headers=admin).status_code == 404


def test_readyz_reports_database_and_broker(client: TestClient) -> None:
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["database"]["ok"]
    assert ready.json()["broker"]["ok"]


def test_an_auto_engine_launch_on_a_host_without_gpus_holds_none(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    register_host(settings, "cpu-box", gpus=0)
    register_host(settings, "gpu-box", gpus=2)
    spec = {"kind": "launch", "params": {"engine": "auto", "model": "/models/t", "tp_size": 2}}
    on_cpu = client.post("/v1/jobs", json={**spec, "host": "cpu-box"}, headers=admin)
    assert on_cpu.status_code == 201, on_cpu.text
    assert on_cpu.json()["gpus_requested"] == 0  # the stage falls back to the reference engine there
    on_gpu = client.post("/v1/jobs", json={**spec, "host": "gpu-box"}, headers=admin).json()
    assert on_gpu["gpus_requested"] == 2
    sglang = {"kind": "launch", "host": "cpu-box", "params": {"engine": "sglang", "model": "/models/t"}}
    assert client.post("/v1/jobs", json=sglang, headers=admin).status_code == 409


def test_an_auto_device_eval_leases_a_gpu_where_the_host_has_one(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    """Run 4 on the H200: a pipeline's eval with the default device ran on the CPU for 5 minutes beside an
    idle GPU, because `auto` meant "the GPU the job holds" and nothing leased one."""
    register_host(settings, "cpu-box", gpus=0)
    register_host(settings, "gpu-box", gpus=1)
    spec = {"kind": "eval", "params": {"model": "/models/t", "draft": "/models/d"}}
    on_gpu = client.post("/v1/jobs", json={**spec, "host": "gpu-box"}, headers=admin)
    assert on_gpu.status_code == 201, on_gpu.text
    assert on_gpu.json()["gpus_requested"] == 1
    on_cpu = client.post("/v1/jobs", json={**spec, "host": "cpu-box"}, headers=admin).json()
    assert on_cpu["gpus_requested"] == 0  # the stage runs on the CPU there
    cpu = {**spec, "host": "gpu-box", "params": {**spec["params"], "device": "cpu"}}
    assert client.post("/v1/jobs", json=cpu, headers=admin).json()["gpus_requested"] == 0
    cuda = {**spec, "host": "cpu-box", "params": {**spec["params"], "device": "cuda"}}
    assert client.post("/v1/jobs", json=cuda, headers=admin).status_code == 409
