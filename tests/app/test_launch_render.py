"""POST/GET /v1/launch/render: a dry-run launch on the host through a real worker; nothing starts."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi.testclient import TestClient

from app.core.config import Settings
from tests.conftest import WorkerProcess
from workers.ml.demo_assets import successor_target

Headers = dict[str, str]


def test_render_shows_argv_and_every_finding_without_starting_anything(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    root = settings.allowed_roots[0] / "render"
    target = successor_target(root / "target")
    spec = {
        "engine": "sglang",
        "model": str(target),
        "draft": str(root / "missing-draft"),
        "depth": 3,
        "extra_args": ["--num-speculative-tokens", "16", "--num-continuous-decode-steps", "4"],
    }
    response = client.post(
        "/v1/launch/render", json={"spec": spec, "host": "gpu-a", "timeout": 90}, headers=admin
    )
    assert response.status_code == 200, response.text
    rendered = response.json()
    assert rendered["ok"] is False
    codes = {f["code"] for f in rendered["findings"]}
    assert {"UNKNOWN_FLAG", "IGNORED_FLAG"} <= codes, codes  # SGLang's own parser, then eyas's rules
    assert any(f["code"] == "PATH_MISSING" or "draft" in f["message"] for f in rendered["findings"])
    job = client.get(f"/v1/jobs/{rendered['job_id']}", headers=admin).json()
    assert job["params"]["dry_run"] is True
    assert job["gpus_requested"] == 0
    assert client.get("/v1/servers", headers=admin).json() == []  # nothing was started


def test_render_of_a_good_reference_spec_via_get(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    target = successor_target(settings.allowed_roots[0] / "render-get" / "target")
    spec = json.dumps({"engine": "reference", "model": str(target), "port": 31555})
    response = client.get(
        "/v1/launch/render", params={"spec": spec, "host": "gpu-a", "timeout": 90}, headers=admin
    )
    rendered = response.json()
    assert rendered["ok"] is True, rendered
    assert "workers.serving.reference_engine" in " ".join(rendered["argv"])
    assert "--port" in rendered["argv"]


def test_render_refuses_bad_specs_before_any_job(client: TestClient, admin: Headers, reader: Headers) -> None:
    bad = client.post("/v1/launch/render", json={"spec": {"model": "relative/path"}}, headers=admin)
    assert bad.status_code == 422
    assert client.get("/v1/launch/render", params={"spec": "{not json"}, headers=admin).status_code == 422
    assert client.post("/v1/launch/render", json={"spec": {}}, headers=reader).status_code == 403
    assert client.get("/v1/jobs", headers=admin).json()["items"] == []
