"""POST /v1/jobs with kind generate: a good request is queued with the engine filled in, a bad one is a 422
problem+json naming the field and stores nothing (real PostgreSQL, as tests/app)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from tests.app.test_jobs_api import job_count, register_host


def good_params(root: Path) -> dict[str, Any]:
    return {
        "target": str(root / "models" / "target"),
        "prompts": str(root / "prompts.jsonl"),
        "output": str(root / "out" / "conversations.jsonl"),
        "engine": {"engine": "reference"},
    }


def test_a_generate_job_is_queued_with_its_engine(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    root = settings.allowed_roots[0] / "generate"
    register_host(settings, "cpu-box", roots=[str(settings.allowed_roots[0])])
    body = {"kind": "generate", "host": "cpu-box", "params": good_params(root)}
    response = client.post("/v1/jobs", json=body, headers=admin)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["params"]["engine"]["model"] == str(root / "models" / "target")
    assert job["params"]["resume"] is True
    assert job["gpus_requested"] == 0


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"output": "/data/../etc/cron.d/x"}, "params.output", "'..'"),
        ({"prompts": "/data/p\u0000.jsonl"}, "params.prompts", "control"),
        ({"target": "/data/\ud800"}, "params.target", "surrogate"),
        ({"temperature": "NaN"}, "params.temperature", "valid number"),  # a string is not a number
        ({"top_p": 1e400}, "params.top_p", "finite"),
        ({"prompts": None}, "params", "nothing to generate from"),
        ({"engine": {"engine": "reference", "draft": "/data/d"}}, "params", "serves the target alone"),
        ({"self_prompts": {"count": 3, "min_chars": 9, "max_chars": 2}}, "params.self_prompts", "max_chars"),
        ({"self_prompts": {"count": 3, "openers": ["Write \u202e"]}}, "params.self_prompts", "bidirectional"),
        ({"self_prompts": {"count": 3, "openers": "everything"}}, "params.self_prompts", "'tasks'"),
    ],
)
def test_bad_generate_params_are_a_problem_and_store_nothing(
    client: TestClient, admin: dict[str, str], params: dict[str, Any], field: str, says: str
) -> None:
    before = job_count(client, admin)
    body = {"kind": "generate", "host": "gpu-a", "params": {**good_params(Path("/data")), **params}}
    # Sent as JSON text: a lone surrogate travels as its \ud800 escape and 1e400 as an overflowing literal
    raw = json.dumps(body).replace("Infinity", "1e400")
    response = client.post("/v1/jobs", content=raw, headers={**admin, "content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    # Text and numbers no JSON value may carry are refused at the API's edge (body.params.…), the rest by
    # the stage's params model (params.…)
    assert problem["code"] in ("INVALID_PARAMS", "VALIDATION_FAILED")
    fields = [e["field"].removeprefix("body.") for e in problem["errors"] if says in e["message"]]
    assert any(f.startswith(field) for f in fields), problem
    assert job_count(client, admin) == before
