"""Text and numbers JSON can carry but eyas refuses, against the real API on PostgreSQL: lone surrogates,
non-finite numbers, bidirectional controls in paths, fix_keys writing into its own source; and reads that
stay whole when a row stored before these checks holds a lone surrogate."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.config import Settings
from app.core.db import session_scope
from tests.app.test_jobs_api import register_host
from tests.app.test_pipelines_api import spec as pipeline_spec

Headers = dict[str, str]
JSON = {"content-type": "application/json"}


def post_raw(client: TestClient, url: str, body: str, headers: Headers) -> Any:
    """POST a JSON text as written (httpx's json= can carry neither NaN nor a lone surrogate)."""
    return client.post(url, content=body.encode("ascii"), headers={**headers, **JSON})


def assert_422(response: Any, field: str, words: str) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert field in problem["detail"], problem
    assert words in problem["detail"], problem
    return problem


def job_rows(settings: Settings) -> int:
    with session_scope(settings) as session:
        return int(session.execute(text("SELECT count(*) FROM job")).scalar_one())


def train_body(root: Path, **params: str) -> str:
    paths = {"data": f"{root}/hs", "target": f"{root}/t", "output": f"{root}/out", "device": "cpu"}
    fields = [f'"{k}": {json.dumps(v)}' for k, v in paths.items()] + [
        f'"{k}": {v}' for k, v in params.items()
    ]
    return '{"kind": "train", "host": "gpu-a", "params": {' + ", ".join(fields) + "}}"


def test_a_lone_surrogate_is_a_422_everywhere_and_the_connection_stays_usable(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    register_host(settings, "gpu-a")
    body = '{"kind": "selftest", "host": "gpu-a", "params": {"marker_file": "/tmp/\\ud800"}}'
    assert_422(post_raw(client, "/v1/jobs", body, admin), "body.params.marker_file", "lone surrogate")
    assert client.get("/v1/jobs", headers=admin).status_code == 200  # the next request on the connection
    key = '{"kind": "selftest", "host": "gpu-a", "params": {"\\udfff": 1}}'
    assert_422(post_raw(client, "/v1/jobs", key, admin), "body.params", "lone surrogate")
    render = '{"spec": {"engine": "reference", "model": "/m/\\ud800"}, "host": "gpu-a"}'
    assert_422(post_raw(client, "/v1/launch/render", render, admin), "body.spec.model", "lone surrogate")
    spec = '{"engine": "reference", "model": "/m/\\ud800"}'  # JSON in a query parameter: the params model
    got = client.get("/v1/launch/render", params={"spec": spec, "host": "gpu-a", "timeout": 1}, headers=admin)
    assert_422(got, "params.model", "lone surrogate")
    encoded = client.get("/v1/jobs?kind=%ED%A0%80", headers=admin)  # a surrogate encoded as UTF-8
    assert_422(encoded, "query.kind", "UTF-8")
    assert_422(client.get("/v1/hosts/gpu%00a", headers=admin), "path", "NUL")
    assert job_rows(settings) == 0
    assert client.get("/v1/jobs", headers=admin).status_code == 200


def poison(settings: Settings, job_id: str, pipeline_id: str | None = None) -> None:
    """What a row written before the checks looks like: JSON text escaping a lone surrogate."""
    bad = json.dumps({"marker_file": "/x/\ud800", "\udfff": ["\ud83d"]})  # ensure_ascii: \\ud800 escapes
    assert "\\ud800" in bad
    with session_scope(settings) as session:
        session.execute(
            text("UPDATE job SET params = CAST(:p AS json), result = CAST(:p AS json) WHERE id = :id"),
            {"p": bad, "id": uuid.UUID(job_id)},
        )
        if pipeline_id is not None:
            session.execute(
                text("UPDATE pipeline SET spec = CAST(:p AS json) WHERE id = :id"),
                {"p": json.dumps({"workdir": "/w/\udbff", "target": "/t"}), "id": uuid.UUID(pipeline_id)},
            )


def test_a_stored_lone_surrogate_never_poisons_a_read(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    register_host(settings, "gpu-a")
    good = client.post("/v1/jobs", json={"kind": "selftest", "host": "gpu-a"}, headers=admin).json()
    bad = client.post("/v1/jobs", json={"kind": "selftest", "host": "gpu-a"}, headers=admin).json()
    pipeline = client.post("/v1/pipelines", json=pipeline_spec(str(tmp_path)), headers=admin).json()
    poison(settings, bad["id"], pipeline["id"])
    poison(settings, pipeline["jobs"][0]["id"])
    for url in (
        "/v1/jobs",
        "/v1/jobs?kind=selftest",
        "/v1/jobs?state=queued&host=gpu-a",
        f"/v1/jobs?pipeline_id={pipeline['id']}",
        f"/v1/jobs/{bad['id']}",
        "/v1/pipelines",
        f"/v1/pipelines/{pipeline['id']}",
    ):
        response = client.get(url, headers=admin)
        assert response.status_code == 200, (url, response.text[:300])
        assert "\ufffd" in response.text or "\\ufffd" in response.text, url
    listed = {j["id"]: j for j in client.get("/v1/jobs", headers=admin).json()["items"]}
    assert listed[good["id"]]["params"] == good["params"]  # the clean rows are read as stored
    assert listed[bad["id"]]["params"]["marker_file"] == "/x/\ufffd"
    assert listed[bad["id"]]["params"]["\ufffd"] == ["\ufffd"]


@pytest.mark.parametrize(
    ("param", "raw"),
    [("grad_clip", "Infinity"), ("lr", "NaN"), ("weight_decay", "-Infinity"), ("step_decay", "1e400")],
)
def test_a_non_finite_number_is_a_422_naming_the_field(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path, param: str, raw: str
) -> None:
    register_host(settings, "gpu-a")
    response = post_raw(client, "/v1/jobs", train_body(tmp_path, **{param: raw}), admin)
    problem = assert_422(response, f"params.{param}", "non-finite number")
    assert "should be" not in problem["detail"]  # not "should be ≤ 1": the problem is the number itself
    assert job_rows(settings) == 0
    timeout = '{"kind": "selftest", "host": "gpu-a", "timeout_s": NaN}'  # request fields too, not only params
    assert_422(post_raw(client, "/v1/jobs", timeout, admin), "body.timeout_s", "non-finite number")
    spec = f'{{"engine": "reference", "model": "{tmp_path}/m", "mem_fraction_static": {raw}}}'
    got = client.get("/v1/launch/render", params={"spec": spec, "host": "gpu-a", "timeout": 1}, headers=admin)
    assert_422(got, "mem_fraction_static", "non-finite number")
    assert job_rows(settings) == 0
    for url in (f"/v1/jobs/{uuid.uuid4()}/wait?timeout=nan", "/v1/launch/render?spec=%7B%7D&timeout=inf"):
        assert_422(client.get(url, headers=admin), "timeout", "non-finite number")  # not "should be <= 600"
    finite = post_raw(client, "/v1/jobs", train_body(tmp_path, grad_clip="1e300"), admin)
    assert finite.status_code == 201, finite.text
    assert finite.json()["params"]["grad_clip"] == 1e300  # stored as given, never as null


@pytest.mark.parametrize(
    ("source", "dest", "words"),
    [
        ("ckpt", "ckpt", "is the source"),
        ("ckpt", "ckpt/", "is the source"),
        ("ckpt", "./ckpt//", "is the source"),
        ("ckpt", "ckpt/fixed", "inside the source"),
        ("a/ckpt", "a", "contains the source"),
    ],
)
def test_fix_keys_into_its_own_source_is_refused_at_submit(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path, source: str, dest: str, words: str
) -> None:
    register_host(settings, "gpu-a")
    params = {"source": f"{tmp_path}/{source}", "dest": f"{tmp_path}/{dest}"}
    response = client.post(
        "/v1/jobs", json={"kind": "fix_keys", "host": "gpu-a", "params": params}, headers=admin
    )
    assert_422(response, "params", words)
    assert job_rows(settings) == 0
    apart = {"source": f"{tmp_path}/ckpt", "dest": f"{tmp_path}/ckpt-sglang"}  # a sibling sharing a prefix
    ok = client.post("/v1/jobs", json={"kind": "fix_keys", "host": "gpu-a", "params": apart}, headers=admin)
    assert ok.status_code == 201, ok.text


@pytest.mark.parametrize(
    "char",
    ["\u202e", "\u202a", "\u202d", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c", "\x00", "\x1b", "\x85"],
)
def test_bidi_and_control_characters_in_a_path_are_refused_at_submit(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path, char: str
) -> None:
    register_host(settings, "gpu-a")
    params = {"source": f"{tmp_path}/ckpt", "dest": f"{tmp_path}/out{char}txt.exe"}
    response = client.post(
        "/v1/jobs", json={"kind": "fix_keys", "host": "gpu-a", "params": params}, headers=admin
    )
    assert_422(response, "params.dest", "control")
    pipeline = {"target": f"{tmp_path}/t{char}", "data": f"{tmp_path}/d.jsonl", "workdir": f"{tmp_path}/w"}
    assert client.post("/v1/pipelines", json=pipeline, headers=admin).status_code == 422
    assert job_rows(settings) == 0
