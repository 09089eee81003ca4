"""The structure of every JSON body is bounded at the edge, for every route that can take one: nesting
depth, keys per object, items per array, and no key given twice in one object. Each is a 422 problem+json
naming the limit and where it was passed, and nothing stored changes. Against the real API on PostgreSQL."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.core.bounded_json import MAX_DEPTH, MAX_ITEMS, MAX_KEYS
from app.core.config import Settings
from tests.app.test_jobs_api import register_host
from tests.app.test_pipelines_api import spec as pipeline_spec
from tests.reliability._hostile import routes
from tests.reliability.test_hostile_input import table_counts

Headers = dict[str, str]
JSON = {"content-type": "application/json"}
BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def nested(depth: int) -> str:
    """A job whose params hold a list nested so that the whole document is `depth` levels deep."""
    inner = depth - 2  # the body object and its params object are two levels
    return '{"kind": "selftest", "host": "gpu-a", "params": {"x": ' + "[" * inner + "]" * inner + "}}"


def body_routes(app: FastAPI) -> list[str]:
    """Every route that a request with a body reaches, with its path parameters filled in."""
    urls = [
        re.sub(r"\{\w+(:path)?\}", str(uuid.uuid4()), path)
        for method, path in routes(app)
        if method in BODY_METHODS
    ]
    assert {"/v1/jobs", "/v1/pipelines", "/v1/launch/render", "/v1/tokens"} <= set(urls), urls
    return urls


def assert_refused(response: Any, kind: str, field: str | tuple[str, ...], words: str) -> None:
    assert response.status_code == 422, response.text[:400]
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "VALIDATION_FAILED", problem
    assert problem["errors"][0]["type"] == kind, problem
    assert problem["errors"][0]["field"] in ((field,) if isinstance(field, str) else field), problem
    assert words in problem["detail"], problem


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300, 990, 5000, 50_000])
def test_a_body_nested_past_the_limit_is_a_422_on_every_route(
    client: TestClient, admin: Headers, settings: Settings, depth: int
) -> None:
    register_host(settings, "gpu-a")
    before = table_counts(settings)
    # The first array past the limit, named; "body" alone when the document is too deep for Python's
    # parser to build at all (a few hundred levels past the limit, by its recursion limit).
    past_limit = "body.params.x" + ".0" * (MAX_DEPTH - 2)  # x is at depth 3
    fields = (past_limit,) if depth < 500 else (past_limit, "body")
    for url in body_routes(cast(FastAPI, client.app)):
        response = client.post(url, content=nested(depth), headers={**admin, **JSON})
        assert_refused(response, "json_depth", fields, f"deeper than {MAX_DEPTH} levels")
    assert table_counts(settings) == before


def test_a_body_at_the_depth_limit_is_judged_by_its_route(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    register_host(settings, "gpu-a")
    answer = client.post("/v1/jobs", content=nested(MAX_DEPTH), headers={**admin, **JSON})
    assert_judged_by_the_route(answer)


def assert_judged_by_the_route(answer: Any) -> None:
    """The edge let the body through: selftest's params model refuses the unknown key `x` itself."""
    assert answer.status_code == 422, answer.text[:400]
    problem = answer.json()
    assert (problem["code"], problem["errors"][0]["type"]) == ("INVALID_PARAMS", "extra_forbidden"), problem


def test_a_key_given_twice_is_refused_not_the_last_one_kept(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    register_host(settings, "gpu-a")
    before = table_counts(settings)
    twice = '{"name": "ci", "scopes": ["read"], "scopes": ["admin"]}'
    assert_refused(
        client.post("/v1/tokens", content=twice, headers={**admin, **JSON}),
        "json_duplicate_key",
        "body.scopes",
        "given twice",
    )
    deep = json.dumps(pipeline_spec(str(tmp_path))).replace(
        '"train": {', '"train": {"epochs": 1, "epochs": 2, ', 1
    )
    assert_refused(
        client.post("/v1/pipelines", content=deep, headers={**admin, **JSON}),
        "json_duplicate_key",
        "body.train.epochs",
        "given twice",
    )
    for url in body_routes(cast(FastAPI, client.app)):
        response = client.post(url, content='{"a": 1, "a": 1}', headers={**admin, **JSON})
        assert_refused(response, "json_duplicate_key", "body.a", "given twice")
    assert table_counts(settings) == before


def test_wide_objects_and_long_arrays_are_refused_naming_the_limit(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    register_host(settings, "gpu-a")
    before = table_counts(settings)
    wide = {"kind": "selftest", "host": "gpu-a", "params": {f"k{i}": 0 for i in range(MAX_KEYS + 1)}}
    long = {"kind": "selftest", "host": "gpu-a", "params": {"x": [0] * (MAX_ITEMS + 1)}}
    for url in body_routes(cast(FastAPI, client.app)):
        response = client.post(url, json=wide, headers=admin)
        assert_refused(response, "json_keys", "body.params", f"more than {MAX_KEYS} keys")
        response = client.post(url, json=long, headers=admin)
        assert_refused(response, "json_items", "body.params.x", f"more than {MAX_ITEMS} items")
    assert table_counts(settings) == before
    at_limit = {"kind": "selftest", "host": "gpu-a", "params": {"x": [0] * MAX_ITEMS}}
    assert_judged_by_the_route(client.post("/v1/jobs", json=at_limit, headers=admin))
    widest = {"kind": "selftest", "host": "gpu-a", "params": {f"k{i}": 0 for i in range(MAX_KEYS)}}
    assert_judged_by_the_route(client.post("/v1/jobs", json=widest, headers=admin))


def test_the_launch_specs_query_parameter_is_bounded_the_same_way(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    before = table_counts(settings)
    deep = "[" * 400 + "]" * 400
    answer = client.get("/v1/launch/render", params={"spec": deep}, headers=admin)
    assert_refused(answer, "json_depth", "query.spec" + ".0" * MAX_DEPTH, f"deeper than {MAX_DEPTH}")
    twice = '{"engine": "reference", "engine": "sglang"}'
    answer = client.get("/v1/launch/render", params={"spec": twice}, headers=admin)
    assert_refused(answer, "json_duplicate_key", "query.spec.engine", "given twice")
    assert table_counts(settings) == before
