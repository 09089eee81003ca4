"""Hostile input across the API: each request is refused with a 4xx problem+json naming what is wrong, and
no stored row is added, changed or removed (every table is counted before and after)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.config import Settings
from app.core.db import session_scope
from app.hosts import service as hosts_service
from tests.app.test_jobs_api import register_host
from tests.conftest import TABLES
from tests.reliability._hostile import hostile_values, probes, routes

Headers = dict[str, str]
CYRILLIC_P, CYRILLIC_E, CYRILLIC_A = "\u0440", "\u0435", "\u0430"


def table_counts(settings: Settings) -> dict[str, tuple[int, str]]:
    """Row count and a digest of every row of every table: an UPDATE shows up as well as an INSERT."""
    counts = {}
    with session_scope(settings) as session:
        for table in TABLES:
            digest = "md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))"
            row = session.execute(text(f"SELECT count(*), {digest} FROM {table} t")).one()
            counts[table] = (int(row[0]), str(row[1]))
    return counts


@pytest.fixture
def host_root(settings: Settings) -> Path:
    """A registered host whose allowed roots are the run's work root (as its worker would report them)."""
    root = settings.allowed_roots[0]
    with session_scope(settings) as session:
        hosts_service.record_heartbeat(
            session, name="gpu-a", worker="gpu-a@test", gpus=[], gpu_error="no NVML here", shm=None,
            allowed_roots=[str(root)],
        )  # fmt: skip
    return Path(root)


def launch(root: Path, **params: Any) -> dict[str, Any]:
    return {
        "kind": "launch",
        "host": "gpu-a",
        "params": {"engine": "reference", "model": f"{root}/m", **params},
    }


def selftest(**params: Any) -> dict[str, Any]:
    return {"kind": "selftest", "host": "gpu-a", "params": params}


def refused(
    client: TestClient,
    settings: Settings,
    auth: Headers,
    method: str,
    url: str,
    status: int,
    code: str,
    **kw: Any,
) -> dict[str, Any]:
    before = table_counts(settings)
    response = client.request(method, url, headers={**auth, **kw.pop("headers", {})}, **kw)
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    problem: dict[str, Any] = response.json()
    assert problem["code"] == code, problem
    assert problem["detail"], problem
    assert table_counts(settings) == before, "a refused request changed stored rows"
    return problem


def bad_job(root: Path) -> list[tuple[str, dict[str, Any], int, str, str]]:
    """(case, body, status, code, a word the problem must contain)."""
    return [
        ("traversal", selftest(marker_file=f"{root}/../../etc/passwd"), 422, "INVALID_PARAMS", ".."),
        ("traversal-mid", selftest(marker_file=f"{root}/a/../../../x"), 422, "INVALID_PARAMS", ".."),
        ("outside-roots", selftest(marker_file="/etc/eyas-marker"), 422, "PATH_NOT_ALLOWED", "allowed roots"),
        ("relative", selftest(marker_file="etc/passwd"), 422, "INVALID_PARAMS", "absolute"),
        ("shell-semicolon", selftest(marker_file=f"{root}/m;touch /tmp/x"), 422, "INVALID_PARAMS", "meta"),
        ("shell-subst", selftest(marker_file=f"{root}/$(id)"), 422, "INVALID_PARAMS", "meta"),
        ("shell-backtick", selftest(marker_file=f"{root}/`id`"), 422, "INVALID_PARAMS", "meta"),
        ("nul-byte", selftest(marker_file=f"{root}/m\x00x"), 422, "INVALID_PARAMS", "control"),
        ("newline", selftest(marker_file=f"{root}/m\nx"), 422, "INVALID_PARAMS", "control"),
        ("unknown-param", selftest(rm_rf=True), 422, "INVALID_PARAMS", "rm_rf"),
        ("confusable-kind", {"kind": f"s{CYRILLIC_E}lftest"}, 422, "VALIDATION_FAILED", "kind"),
        ("confusable-host", {**selftest(), "host": f"g{CYRILLIC_P}u-a"}, 422, "VALIDATION_FAILED", "host"),
        ("fullwidth-host", {**selftest(), "host": "\uff47pu-a"}, 422, "VALIDATION_FAILED", "host"),
        ("shell-host", {**selftest(), "host": "gpu-a;reboot"}, 422, "VALIDATION_FAILED", "host"),
        (
            "env-ld-preload",
            launch(root, env={"LD_PRELOAD": "/tmp/x.so"}),
            422,
            "INVALID_PARAMS",
            "LD_PRELOAD",
        ),
        ("env-pythonpath", launch(root, env={"PYTHONPATH": "/tmp"}), 422, "INVALID_PARAMS", "PYTHONPATH"),
        ("env-path", launch(root, env={"PATH": "/tmp"}), 422, "INVALID_PARAMS", "PATH"),
        (
            "env-lease",
            launch(root, env={"CUDA_VISIBLE_DEVICES": "0,1"}),
            422,
            "INVALID_PARAMS",
            "CUDA_VISIBLE",
        ),
        ("env-lowercase", launch(root, env={"nccl_debug": "INFO"}), 422, "INVALID_PARAMS", "nccl_debug"),
        (
            "env-newline",
            launch(root, env={"NCCL_DEBUG": "INFO\nLD_PRELOAD=x"}),
            422,
            "INVALID_PARAMS",
            "control",
        ),
        (
            "args-model-path",
            launch(root, extra_args=["--model-path", "/etc"]),
            422,
            "INVALID_PARAMS",  # a flag eyas renders itself: refused before its path is even looked at
            "--model-path",
        ),
        (
            "args-inline-file",
            launch(root, extra_args=["--chat-template=/etc/shadow"]),
            422,
            "PATH_NOT_ALLOWED",
            "shadow",
        ),
        (
            "args-abs-value",
            launch(root, extra_args=["--x", "/root/.ssh/id_rsa"]),
            422,
            "PATH_NOT_ALLOWED",
            "ssh",
        ),
        (
            "args-control",
            launch(root, extra_args=["--log-requests\n--host"]),
            422,
            "INVALID_PARAMS",
            "control",
        ),
        ("args-too-many", launch(root, extra_args=["--x"] * 65), 422, "INVALID_PARAMS", "64"),
        ("launch-bind", launch(root, host="0.0.0.0;id"), 422, "INVALID_PARAMS", "host"),
    ]


@pytest.mark.usefixtures("host_root")
def test_hostile_job_submissions_are_refused_and_change_nothing(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    root = settings.allowed_roots[0]
    for case, body, status, code, word in bad_job(Path(root)):
        problem = refused(client, settings, admin, "POST", "/v1/jobs", status, code, json=body)
        assert word.lower() in json.dumps(problem).lower(), (case, problem)


# Flags eyas renders itself, and flags that read more flags from a file, are refused by the launch stage on
# the host (drafting/serving/launch/flag_checks.py) but not at submit: the API answers 201 and the job fails
# later.
SMUGGLED_FLAGS = [
    ["--tp-size", "8"],  # more GPUs than the lease
    ["--port", "22"],
    ["--host", "0.0.0.0"],  # binds every interface
    ["--speculative-algorithm", "NEXTN"],
    ["--config", "FLAGS.yaml"],  # flags from a file no check sees
]


@pytest.mark.usefixtures("host_root")
@pytest.mark.parametrize("args", SMUGGLED_FLAGS, ids=lambda a: a[0])
def test_extra_args_that_override_eyas_flags_are_refused_at_submit(
    client: TestClient, admin: Headers, settings: Settings, args: list[str]
) -> None:
    args = [a.replace("FLAGS.yaml", f"{settings.allowed_roots[0]}/flags.yaml") for a in args]
    refused(
        client,
        settings,
        admin,
        "POST",
        "/v1/jobs",
        422,
        "INVALID_PARAMS",
        json=launch(settings.allowed_roots[0], extra_args=args),
    )


@pytest.mark.usefixtures("host_root")
def test_huge_and_deeply_nested_bodies_are_refused(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    huge = json.dumps(selftest(pad="x" * (2 * 1024 * 1024)))
    json_headers = {"content-type": "application/json"}
    refused(
        client, settings, admin, "POST", "/v1/jobs", 413, "BODY_TOO_LARGE", content=huge, headers=json_headers
    )

    depth = 50_000
    nested = '{"kind": "selftest", "host": "gpu-a", "params": {"lines": ' + "[" * depth + "]" * depth + "}}"
    refused(
        client,
        settings,
        admin,
        "POST",
        "/v1/jobs",
        422,
        "VALIDATION_FAILED",
        content=nested,
        headers=json_headers,
    )
    refused(
        client,
        settings,
        admin,
        "POST",
        "/v1/jobs",
        422,
        "VALIDATION_FAILED",
        content=b'{"kind": ',
        headers=json_headers,
    )


def test_hostile_names_and_paths_in_urls_and_tokens_are_refused(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    for name in (f"{CYRILLIC_A}dmin", "admin\x00", "admin; DROP TABLE api_token", "", "x" * 129, "../etc"):
        body = {"name": name, "scopes": ["read"]}
        refused(client, settings, admin, "POST", "/v1/tokens", 422, "VALIDATION_FAILED", json=body)
    refused(
        client,
        settings,
        admin,
        "POST",
        "/v1/tokens",
        422,
        "VALIDATION_FAILED",
        json={"name": "ok", "scopes": ["root"]},
    )
    refused(client, settings, admin, "GET", f"/v1/hosts/g{CYRILLIC_P}u-a", 422, "VALIDATION_FAILED")
    refused(client, settings, admin, "GET", "/v1/jobs/..%2F..%2Fetc%2Fpasswd", 404, "NOT_FOUND")
    refused(client, settings, admin, "GET", "/v1/jobs/not-a-uuid;id", 422, "VALIDATION_FAILED")
    for path in (
        "/dashboard/../../etc/passwd",
        "/dashboard/%2e%2e/%2e%2e/etc/passwd",
        "/dashboard/..%2F..%2Fapp%2Fmain.py",
    ):
        refused(client, settings, admin, "GET", path, 404, "NOT_FOUND")
    refused(
        client,
        settings,
        admin,
        "GET",
        "/v1/jobs",
        422,
        "VALIDATION_FAILED",
        params={"cursor": "eyJ" + "A" * 40},
    )
    refused(
        client,
        settings,
        admin,
        "GET",
        "/v1/jobs",
        422,
        "VALIDATION_FAILED",
        params={"limit": "10; DROP TABLE job"},
    )
    refused(
        client,
        settings,
        admin,
        "POST",
        "/v1/jobs",
        422,
        "VALIDATION_FAILED",
        json=selftest(),
        headers={"Idempotency-Key": "k\u00e9y".encode()},
    )


def test_an_overlong_bearer_value_is_refused(api_server: str, settings: Settings) -> None:
    before = table_counts(settings)
    with httpx.Client(base_url=api_server, timeout=10) as http:
        long_token = http.get("/v1/jobs", headers={"Authorization": "Bearer " + "a" * 4000})
    assert long_token.status_code == 401
    assert long_token.json()["code"] == "UNAUTHENTICATED"
    assert table_counts(settings) == before


def test_a_lone_surrogate_leaves_the_connection_usable(api_server: str, admin: Headers) -> None:
    """Over a real keep-alive connection: the 422 is whole and the next request on it is served."""
    body = b'{"kind": "selftest", "host": "gpu-a", "params": {"marker_file": "/x/\\ud800"}}'
    with httpx.Client(base_url=api_server, timeout=10) as http:
        for _ in range(3):
            refused = http.post(
                "/v1/jobs", content=body, headers={**admin, "content-type": "application/json"}
            )
            assert refused.status_code == 422, refused.text
            assert "lone surrogate" in refused.json()["detail"]
            assert http.get("/v1/jobs", headers=admin).status_code == 200


def test_a_huge_header_block_is_refused(api_server: str, admin: Headers) -> None:
    # The server (h11, 64 KiB limit) answers 431 and closes; a client still sending its 1 MiB of headers
    # may see that as a connection reset instead. Either way the request is not served.
    with httpx.Client(base_url=api_server, timeout=30) as http:
        try:
            status = http.get("/v1/jobs", headers={**admin, "X-Padding": "p" * (1024 * 1024)}).status_code
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
            status = None
        assert status in (None, 400, 431), status
        assert http.get("/v1/jobs", headers=admin).status_code == 200  # and the server is fine


def oversized_chunks() -> Iterator[bytes]:
    """2.5 MiB with no Content-Length: the limit has to count what arrives."""
    for _ in range(40):
        yield b" " * 64 * 1024


@pytest.mark.usefixtures("host_root")
def test_a_streamed_oversized_body_is_refused(client: TestClient, admin: Headers, settings: Settings) -> None:
    before = table_counts(settings)
    response = client.post("/v1/jobs", headers=admin, content=oversized_chunks())
    assert 400 <= response.status_code < 500
    assert response.headers["content-type"].startswith("application/problem+json")
    assert table_counts(settings) == before


@pytest.mark.usefixtures("host_root")
def test_a_streamed_oversized_body_gets_413(client: TestClient, admin: Headers, settings: Settings) -> None:
    headers = {"content-type": "application/json"}
    refused(
        client,
        settings,
        admin,
        "POST",
        "/v1/jobs",
        413,
        "BODY_TOO_LARGE",
        content=oversized_chunks(),
        headers=headers,
    )


def test_filter_values_the_database_refuses_are_a_422(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    register_host(settings, "gpu-b")
    job_id = client.post("/v1/jobs", json={"kind": "selftest", "host": "gpu-b"}, headers=admin).json()["id"]
    past_int64 = str(2**70)
    for url in (
        "/v1/jobs?kind=%00",
        "/v1/jobs?host=a%00b",
        "/v1/artifacts?kind=%00",
        f"/v1/jobs/{job_id}/logs?cursor={past_int64}",
        f"/v1/jobs/{job_id}/metrics?since_step={past_int64}",
    ):
        refused(client, settings, admin, "GET", url, 422, "VALIDATION_FAILED")


LISTINGS = (
    "/v1/jobs",
    "/v1/jobs?limit=500",
    "/v1/pipelines",
    "/v1/servers",
    "/v1/benchmarks",
    "/v1/artifacts",
    "/v1/hosts",
    "/v1/tokens",
)


def walk_bodies(root: Path) -> dict[tuple[str, str], Any]:
    """A plausible body per route that takes one, so a hostile value reaches the deep checks (params)."""
    train = {"data": f"{root}/hs", "target": f"{root}/t", "output": f"{root}/o", "device": "cpu", "lr": 1e-4}
    return {
        ("POST", "/v1/jobs"): {
            "kind": "train", "host": "gpu-a", "params": train, "gpus": 0, "timeout_s": 60.0,
            "depends_on": [],
        },
        ("POST", "/v1/pipelines"): {
            "target": f"{root}/t", "data": f"{root}/d.jsonl", "workdir": f"{root}/w", "host": "gpu-a",
            "extract": {"device": "cpu"}, "train": {"device": "cpu", "grad_clip": 1.0},
            "fix_keys": {"sglang_version": "0.5.14"},
        },
        ("POST", "/v1/launch/render"): {
            "spec": {"engine": "reference", "model": f"{root}/m", "mem_fraction_static": 0.5,
                     "env": {"NCCL_DEBUG": "INFO"}, "extra_args": ["--chat-template", f"{root}/c"]},
            "host": "gpu-a", "timeout": 0.2,
        },
        ("POST", "/v1/tokens"): {"name": "walker", "scopes": ["read"]},
    }  # fmt: skip


@pytest.mark.usefixtures("host_root")
def test_every_route_refuses_hostile_values_without_a_500_and_listings_stay_whole(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    root = Path(settings.allowed_roots[0])
    fifo = root / "walk.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    values = hostile_values(str(fifo))
    app = cast(FastAPI, client.app)
    walked: set[tuple[str, str]] = set()
    failures: list[str] = []
    for probe in probes(app, walk_bodies(root), values):
        walked.add((probe.method, probe.route))
        if probe.body is None:
            response = client.request(probe.method, probe.url, headers=admin)
        else:
            content = probe.body.encode("ascii")
            response = client.request(
                probe.method,
                probe.url,
                content=content,
                headers={**admin, "content-type": "application/json"},
            )
        must_refuse = probe.value.url_refused if probe.body is None else probe.value.refused
        what = f"{probe.method} {probe.route} {probe.where}={probe.value.name}: {response.status_code}"
        if response.status_code >= 500 or (must_refuse and not 400 <= response.status_code < 500):
            failures.append(f"{what} {response.text[:160]}")
        elif response.status_code >= 400 and not response.headers["content-type"].startswith(
            "application/problem+json"
        ):
            failures.append(f"{what} is not problem+json")
    assert failures == [], "\n".join(failures[:40])
    assert len(walked) == len(routes(app)) > 20, "the walk missed routes"
    for url in LISTINGS:
        listed = client.get(url, headers=admin)
        assert listed.status_code == 200, (url, listed.text[:300])
    for job in client.get("/v1/jobs?limit=500", headers=admin).json()["items"]:
        assert client.get(f"/v1/jobs/{job['id']}", headers=admin).status_code == 200


@pytest.mark.usefixtures("host_root")
def test_special_files_in_paths_never_reach_a_500(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    """The API never opens a path it is given (they name files on the worker host, checked there); a
    special file outside the allowed roots is refused, one inside is the worker's to refuse."""
    root = Path(settings.allowed_roots[0])
    fifo = root / "special.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    refused(
        client, settings, admin, "POST", "/v1/jobs", 422, "PATH_NOT_ALLOWED",
        json={"kind": "fix_keys", "host": "gpu-a", "params": {"source": "/dev/zero", "dest": f"{root}/o"}},
    )  # fmt: skip
    for params in ({"source": str(fifo), "dest": f"{root}/o"}, {"source": f"{root}/s", "dest": str(fifo)}):
        response = client.post(
            "/v1/jobs", json={"kind": "fix_keys", "host": "gpu-a", "params": params}, headers=admin
        )
        assert response.status_code in (201, 422), response.text
    for url in LISTINGS:
        assert client.get(url, headers=admin).status_code == 200, url
