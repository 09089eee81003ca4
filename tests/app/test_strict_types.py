"""Types are JSON's as written, for every stage's params and every request body: a boolean is not an
integer, a string is not a number nor a boolean; an integer is still a float's value. Each refusal is a 422
naming the field, and nothing is stored. Against the real API on PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from contract.stages import STAGES
from tests.app.test_jobs_api import register_host
from tests.app.test_pipelines_api import spec as pipeline_spec
from tests.reliability.test_hostile_input import table_counts

Headers = dict[str, str]
# JSON values of the wrong type for a field of each JSON schema type
WRONG = {
    "integer": [True, "3", 3.5],
    "number": [True, "0.5"],
    "boolean": [1, "true"],
}


def _types(schema: dict[str, Any]) -> set[str]:
    options = schema.get("anyOf", [schema])
    return {str(o["type"]) for o in options if "type" in o}


def typed_fields() -> list[tuple[str, str, str]]:
    """(kind, field, JSON type) for every scalar param of every stage that is an integer, number or
    boolean (read from the params models, so a new field is covered without being listed)."""
    found = []
    for kind, stage in STAGES.items():
        for name, schema in stage.params.model_json_schema().get("properties", {}).items():
            kinds = _types(schema) & set(WRONG)
            if len(kinds) == 1 and "string" not in _types(schema):
                found.append((kind, name, kinds.pop()))
    return found


def test_the_walk_reads_the_models() -> None:
    found = typed_fields()
    assert {("train", "epochs", "integer"), ("train", "lr", "number"), ("train", "pack", "boolean")} <= set(
        found
    )
    assert {kind for kind, _, _ in found} >= {"train", "extract", "generate", "launch", "benchmark", "eval"}


@pytest.mark.parametrize(("kind", "field", "json_type"), typed_fields())
def test_a_param_of_the_wrong_json_type_is_refused_by_name(
    client: TestClient, admin: Headers, settings: Settings, kind: str, field: str, json_type: str
) -> None:
    register_host(settings, "gpu-a")
    before = table_counts(settings)
    for value in WRONG[json_type]:
        answer = client.post(
            "/v1/jobs", json={"kind": kind, "host": "gpu-a", "params": {field: value}}, headers=admin
        )
        assert answer.status_code == 422, (field, value, answer.text)
        errors = {e["field"]: e for e in answer.json()["errors"]}
        assert f"params.{field}" in errors, (field, value, answer.json())
    assert table_counts(settings) == before


def test_an_integer_is_still_a_floats_value(client: TestClient, admin: Headers, settings: Settings) -> None:
    register_host(settings, "gpu-a")
    root = settings.allowed_roots[0]
    params = {"data": f"{root}/hs", "target": f"{root}/t", "output": f"{root}/o", "lr": 1, "device": "cpu"}
    answer = client.post("/v1/jobs", json={"kind": "train", "host": "gpu-a", "params": params}, headers=admin)
    assert answer.status_code == 201, answer.text
    assert answer.json()["params"]["lr"] == 1


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/v1/jobs", {"kind": "selftest", "host": "gpu-a", "gpus": True}, "body.gpus"),
        ("/v1/jobs", {"kind": "selftest", "host": "gpu-a", "max_attempts": "2"}, "body.max_attempts"),
        ("/v1/jobs", {"kind": "selftest", "host": "gpu-a", "timeout_s": "60"}, "body.timeout_s"),
        ("/v1/tokens", {"name": 7, "scopes": ["read"]}, "body.name"),
        ("/v1/launch/render", {"spec": {}, "host": "gpu-a", "timeout": "5"}, "body.timeout"),
    ],
)
def test_request_bodies_are_strict_too(
    client: TestClient, admin: Headers, settings: Settings, url: str, body: dict[str, Any], field: str
) -> None:
    register_host(settings, "gpu-a")
    before = table_counts(settings)
    answer = client.post(url, json=body, headers=admin)
    assert answer.status_code == 422, answer.text
    assert field in {e["field"] for e in answer.json()["errors"]}, answer.json()
    assert table_counts(settings) == before


def test_a_pipeline_spec_is_strict_in_its_own_fields(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    register_host(settings, "gpu-a")
    before = table_counts(settings)
    body = pipeline_spec(str(tmp_path)) | {
        "held_out": {"conversations": f"{tmp_path}/h.jsonl", "serve": "yes"}
    }
    answer = client.post("/v1/pipelines", json=body, headers=admin)
    assert answer.status_code == 422, answer.text
    assert "body.held_out.serve" in {e["field"] for e in answer.json()["errors"]}, answer.json()
    body = pipeline_spec(str(tmp_path), train={"device": "cpu", "epochs": True})
    answer = client.post("/v1/pipelines", json=body, headers=admin)
    assert answer.status_code == 422, answer.text
    assert "params.epochs" in answer.json()["detail"], answer.json()
    assert table_counts(settings) == before
