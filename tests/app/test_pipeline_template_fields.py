"""Params the eagle3 template sets itself (a step's output folder, the data it reads, the checkpoint it
serves) are refused in a pipeline spec and in a retry, with a 422 naming the field and what sets it, and
nothing stored changes. The list of them is checked against the template: every param of a step's model
that the plan drops is on it, and none that the plan passes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.pipelines.schemas import SECTION_STEPS, SET_BY_TEMPLATE, Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan
from contract.stages import STAGES
from tests.app.test_jobs_api import register_host
from tests.app.test_pipelines_api import run_step, spec
from tests.reliability.test_hostile_input import table_counts

Headers = dict[str, str]
PROBE = "__given_in_the_spec__"


def owned_cases() -> list[tuple[str, str]]:
    return [(section, key) for section, keys in SET_BY_TEMPLATE.items() for key in keys]


def with_param(body: dict[str, Any], section: str, key: str, value: Any) -> dict[str, Any]:
    changed = json.loads(json.dumps(body))
    if section == "benchmark.launch":
        changed["benchmark"]["launch"][key] = value
    else:
        changed.setdefault(section, {})[key] = value
    return changed


def generated(tmp: str) -> dict[str, Any]:
    """A spec that makes its conversations first, so the generate section is planned too."""
    body = spec(tmp)
    del body["data"]
    body["generate"] = {"prompts": f"{tmp}/prompts.jsonl"}
    return body


@pytest.mark.parametrize(("section", "key"), owned_cases())
def test_a_param_the_template_sets_is_refused_naming_what_sets_it(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path, section: str, key: str
) -> None:
    register_host(settings, "gpu-a")
    before = table_counts(settings)
    body = with_param(generated(str(tmp_path)), section, key, "/etc/passwd")
    refused = client.post("/v1/pipelines", json=body, headers=admin)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    detail = refused.json()["detail"]
    assert f"{section}.{key} is set by {SET_BY_TEMPLATE[section][key]}" in detail, detail
    assert table_counts(settings) == before


def test_a_retry_cannot_set_them_either(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    register_host(settings, "gpu-a")
    pipeline = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=admin).json()
    run_step(settings, pipeline["jobs"][0]["id"], ok=False)
    before = table_counts(settings)
    for section, params in (("train", {"output": "/etc"}), ("extract", {"data": "/etc/passwd"})):
        retry = {"from_step": "extract", "params": {section: params}}
        refused = client.post(f"/v1/pipelines/{pipeline['id']}/retry", json=retry, headers=admin)
        assert refused.status_code == 422, refused.text
        field = f"{section}.{next(iter(params))}"
        assert f"{field} is set by" in refused.json()["detail"], refused.json()
    assert table_counts(settings) == before
    fine = {"from_step": "extract", "params": {"train": {"output": None, "epochs": 2}}}
    retried = client.post(f"/v1/pipelines/{pipeline['id']}/retry", json=fine, headers=admin)
    assert retried.status_code == 200, retried.text  # null leaves a param out: the template sets it


# A probe value of each shape a param may need to reach the plan at all (a list of sources, one source, a
# launch spec); the first the template can read is used.
PROBES: tuple[Any, ...] = ([PROBE], PROBE, {PROBE: PROBE})


def planned_with(base: dict[str, Any], section: str, key: str, tmp: Path) -> str:
    """Every step's params as JSON text, planned from `base` with a probe planted at `key` in `section`
    past the spec's validators (they would refuse the very params this check looks for)."""
    top = section.split(".")[0]
    validated = Eagle3PipelineCreate.model_validate(base)
    for probe in PROBES:
        planted = validated.model_copy(update={top: with_param(base, section, key, probe)[top]})
        try:
            plans = eagle3_plan(planted, str(tmp / "runs"))
        except (TypeError, AttributeError):
            continue
        return json.dumps([plan.params for plan in plans])
    raise AssertionError(f"no probe of {section}.{key} could be planned")


@pytest.mark.parametrize("section", [*SECTION_STEPS, "benchmark.launch"])
def test_the_list_is_exactly_what_the_plan_drops(tmp_path: Path, section: str) -> None:
    kind = "launch" if section == "benchmark.launch" else section
    base = generated(str(tmp_path))
    fields = STAGES[kind].params.model_fields
    dropped = {key for key in fields if PROBE not in planned_with(base, section, key, tmp_path)}
    assert dropped == set(SET_BY_TEMPLATE.get(section, {})), section
