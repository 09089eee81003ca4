"""HEAD answers as GET does without the body, OPTIONS names a path's methods, on every route; the OpenAPI
document needs a token and declares the bearer scheme, no viewer loads from a CDN; and no answer carries a
Host the client made up (a trailing slash is a 404, never a redirect built from the Host header)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.core.security import Scope
from app.main import create_app
from tests.app.test_jobs_api import register_host, submit
from tests.conftest import make_token

Headers = dict[str, str]
FOREIGN_HOST = "attacker.example"


def concrete(path: str) -> str:
    return re.sub(
        r"\{(\w+)(:path)?\}", lambda m: str(uuid.uuid4()) if m.group(1).endswith("id") else "gpu-a", path
    )


def paths_by_method(app: FastAPI) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for route in iter_route_contexts(app.routes):
        found.setdefault(route.path, set()).update(route.methods or ())
    return found


@pytest.fixture
def unthrottled(settings: Settings) -> Iterator[TestClient]:
    """An app that counts failed authentications without refusing them: the walks send many anonymous."""
    with TestClient(create_app(settings.model_copy(update={"auth_failures_per_minute": 0}))) as client:
        yield client


def test_head_answers_as_get_without_the_body_on_every_read_route(
    unthrottled: TestClient, admin: Headers, settings: Settings
) -> None:
    client = unthrottled
    register_host(settings, "gpu-a")
    assert client.head("/healthz").status_code == 200  # a health check needs no token
    assert client.head("/v1/jobs").status_code == 401  # as GET: the token is checked
    read_paths = [p for p, m in paths_by_method(cast(FastAPI, client.app)).items() if "GET" in m]
    assert {"/healthz", "/v1/jobs", "/v1/jobs/{job_id}/logs/stream"} <= set(read_paths)
    for path in read_paths:
        url = concrete(path)
        for headers in (admin, {}):
            got, head = client.get(url, headers=headers), client.head(url, headers=headers)
            assert head.status_code == got.status_code, (url, headers, head.status_code, got.status_code)
            assert head.content == b"", url
            assert head.headers.get("content-type") == got.headers.get("content-type"), url


def test_options_names_every_method_of_the_path(unthrottled: TestClient) -> None:
    client = unthrottled
    for path, methods in paths_by_method(cast(FastAPI, client.app)).items():
        answer = client.options(concrete(path))
        assert answer.status_code == 204, (path, answer.text)
        allowed = set(answer.headers["allow"].split(", "))
        expected = methods | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set())
        assert allowed == expected, path
    assert client.options("/v1/nothing-here").status_code == 404


def test_head_on_a_live_log_stream_ends_at_the_headers(
    api_server: str, settings: Settings, client: TestClient, admin: Headers
) -> None:
    register_host(settings, "gpu-a")
    job = submit(client, admin)  # queued: its stream stays open, waiting for lines
    token = make_token(settings, Scope.READ)
    answer = httpx.head(
        f"{api_server}/v1/jobs/{job['id']}/logs/stream",
        headers={"Authorization": f"Bearer {token}"},
        timeout=15,
    )
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")


def test_the_openapi_document_needs_a_token_and_names_the_bearer_scheme(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    assert client.get("/openapi.json").status_code == 401
    reader = {"Authorization": f"Bearer {make_token(settings, Scope.READ)}"}
    document: dict[str, Any] = client.get("/openapi.json", headers=reader).json()
    schemes = document["components"]["securitySchemes"]
    assert list(schemes.values()) == [
        {"type": "http", "scheme": "bearer", "description": schemes["bearer"]["description"]}
    ]
    assert document["security"] == [{"bearer": []}]
    assert document["paths"]["/healthz"]["get"]["security"] == []
    assert "security" not in document["paths"]["/v1/jobs"]["get"]  # the document's own: a token
    for viewer in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        answer = client.get(viewer, headers=admin)
        assert answer.status_code == 404, viewer  # no page that loads its scripts from a CDN


def test_no_answer_carries_a_host_the_client_sent(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    register_host(settings, "gpu-a")
    for path, methods in paths_by_method(cast(FastAPI, client.app)).items():
        for url in (concrete(path) + "/", concrete(path).rstrip("/") + "//"):
            for method in methods:
                answer = client.request(
                    method, url, headers={**admin, "host": FOREIGN_HOST}, follow_redirects=False
                )
                assert answer.status_code not in (301, 302, 307, 308), (method, url, answer.headers)
                assert FOREIGN_HOST not in str(answer.headers).lower(), (method, url)
                assert FOREIGN_HOST not in answer.text, (method, url)
    assert client.get("/v1/jobs/", headers=admin).status_code == 404
