"""GET /v1/benchmarks/compare: two drafts judged on the requests both benchmarks asked, paired by prompt.

The results are recorded through the real finishing path into PostgreSQL. Their per-prompt counts are
written here, not served, so each expected figure can be worked out by hand; that the sweep writes these
fields from real requests is tests/serving/test_serving_sweep.py's check (the reference engine).
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.benchmarks import paired
from app.core.config import Settings
from app.core.db import session_scope
from tests.app.test_job_results import finish_as
from tests.app.test_jobs_api import submit

DIGEST = "d" * 64


def sweep(per_prompt: dict[str, list[tuple[int, int]]], digest: str = DIGEST) -> dict[str, Any]:
    """A sweep result whose configs served these (completion tokens, verify steps) per prompt."""
    rows: list[dict[str, Any]] = [{"config": None, "accept_len": None, "speedup": 1.0}]
    for label, counts in per_prompt.items():
        tokens, steps = sum(t for t, _ in counts), sum(s for _, s in counts)
        rows.append(
            {
                "config": label,
                "accept_len": round(tokens / steps, 4),
                "per_prompt": [{"completion_tokens": t, "spec_verify_ct": s} for t, s in counts],
            }
        )
    return {"mode": "sweep", "rows": rows, "prompt_set": {"prompts": 1, "requests_digest": digest}}


def record(
    client: TestClient, admin: dict[str, str], settings: Settings, result: dict[str, Any], draft: str = "/d/a"
) -> str:
    job_id = str(submit(client, admin)["id"])
    launch = {"model": "/models/smollm2", "draft": draft}
    with session_scope(settings) as session:
        session.execute(
            text("UPDATE job SET params=:params WHERE id=:id"),
            {"params": json.dumps({"mode": "sweep", "launch": launch}), "id": job_id},
        )
    finish_as(settings, job_id, "benchmark", result)
    listed = client.get("/v1/benchmarks", params={"job_id": job_id}, headers=admin).json()["items"]
    return str(listed[0]["id"])


def compare(client: TestClient, headers: dict[str, str], a: str, b: str) -> Any:
    return client.get("/v1/benchmarks/compare", params={"a": a, "b": b}, headers=headers)


def test_a_draft_ahead_on_every_prompt_is_judged_ahead_with_the_pooled_figures(
    client: TestClient, admin: dict[str, str], reader: dict[str, str], settings: Settings
) -> None:
    # 30 prompts: a accepts 3 tokens a step on each (90/30), b 2 (60/30) on one config; on the other both
    # accept 2, except prompt 0, where a accepts 4
    a = record(
        client, admin, settings, sweep({"5,1,6": [(90, 30)] * 30, "3,1,4": [(80, 20)] + [(40, 20)] * 29})
    )
    b = record(
        client, admin, settings, sweep({"5,1,6": [(60, 30)] * 30, "3,1,4": [(40, 20)] * 30}), draft="/d/b"
    )
    response = compare(client, reader, a, b)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["a"]["id"], body["b"]["id"]) == (a, b)
    assert (body["a"]["draft"], body["b"]["draft"], body["a"]["target"]) == (
        "/d/a",
        "/d/b",
        "/models/smollm2",
    )
    assert (body["prompts"], body["requests_digest"], body["notes"]) == (30, DIGEST, [])
    by_config = {c["config"]: c for c in body["configs"]}
    ahead = by_config["5,1,6"]
    assert (ahead["a_accept_len"], ahead["b_accept_len"], ahead["difference"], ahead["ratio"]) == (
        3,
        2,
        1,
        1.5,
    )
    assert (ahead["ci_low"], ahead["ci_high"]) == (1, 1), (
        "every resample of prompts gives the same difference"
    )
    assert (ahead["a_ahead_prompts"], ahead["b_ahead_prompts"], ahead["tied_prompts"]) == (30, 0, 0)
    assert ahead["verdict"].startswith("a accepts more")
    one_prompt = by_config["3,1,4"]
    assert one_prompt["a_accept_len"] == pytest.approx(1240 / 600, abs=1e-4)  # pooled: Σ tokens / Σ steps
    assert (one_prompt["a_ahead_prompts"], one_prompt["tied_prompts"]) == (1, 29)
    # resamples that leave prompt 0 out show no difference: one prompt does not make a draft better
    assert one_prompt["ci_low"] == 0
    assert one_prompt["verdict"].startswith("no difference these prompts can show")
    reversed_body = compare(client, reader, b, a).json()
    assert {c["config"]: c["difference"] for c in reversed_body["configs"]}["5,1,6"] == -1
    assert {c["config"]: c["verdict"] for c in reversed_body["configs"]}["5,1,6"].startswith("b accepts more")


def test_few_prompts_and_configs_measured_by_one_side_only_are_said(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    a = record(client, admin, settings, sweep({"5,1,6": [(30, 10)] * 8, "7,1,8": [(30, 10)] * 8}))
    b = record(client, admin, settings, sweep({"5,1,6": [(20, 10)] * 8, "3,1,4": [(20, 10)] * 8}))
    body = compare(client, admin, a, b).json()
    assert [c["config"] for c in body["configs"]] == ["5,1,6"]
    assert (body["only_in_a"], body["only_in_b"]) == (["7,1,8"], ["3,1,4"])
    assert "8 prompts" in body["notes"][0]
    assert "understates the interval" in body["notes"][0]


@pytest.mark.parametrize(
    ("b_result", "says"),
    [
        (sweep({"5,1,6": [(20, 10)] * 8}, digest="e" * 64), "asked different requests"),
        (
            {"mode": "sweep", "rows": [{"config": "5,1,6", "accept_len": 2.0}]},
            "no prompt_set.requests_digest",
        ),
        (
            {**sweep({"5,1,6": [(20, 10)] * 8}), "rows": [{"config": "5,1,6", "accept_len": 2.0}]},
            "no per-prompt counts",
        ),
        (
            sweep({"5,1,6": [(20, 10)] * 7 + [(20, 0)]}) | {},
            None,
        ),  # a zero-step prompt is a count, not an error
        (
            sweep({"5,1,6": [(20, 10)] * 8})
            | {
                "rows": [{"config": "5,1,6", "accept_len": 2, "per_prompt": [{"completion_tokens": "x"}] * 8}]
            },
            "no token or verify-step count",
        ),
        (sweep({"5,1,6": [(20, 10)] * 8}) | {"rows": {"not": "a list"}}, "no config in both"),
        (sweep({"3,1,4": [(20, 10)] * 8}), "no config in both"),
        (sweep({"5,1,6": [(20, 10)] * 9}), "different numbers of prompts"),
    ],
)
def test_results_that_cannot_be_paired_are_refused_as_not_comparable(
    client: TestClient, admin: dict[str, str], settings: Settings, b_result: dict[str, Any], says: str | None
) -> None:
    """A stored result of any shape gets an answer, never a 500; the results are left as they were."""
    a = record(client, admin, settings, sweep({"5,1,6": [(30, 10)] * 8}))
    b = record(client, admin, settings, b_result)
    before = client.get(f"/v1/benchmarks/{b}", headers=admin).json()
    response = compare(client, admin, a, b)
    if says is None:
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 409, response.text
    problem = response.json()
    assert problem["code"] == "NOT_COMPARABLE"
    assert says in problem["detail"]
    assert response.headers["content-type"].startswith("application/problem+json")
    assert client.get(f"/v1/benchmarks/{b}", headers=admin).json() == before
    assert len(client.get("/v1/benchmarks", headers=admin).json()["items"]) == 2, (
        "the listing still reads both"
    )


def test_unknown_malformed_and_self_comparisons_get_clear_errors(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    a = record(client, admin, settings, sweep({"5,1,6": [(30, 10)] * 8}))
    missing = str(uuid.uuid4())
    assert compare(client, admin, a, missing).status_code == 404
    assert missing in compare(client, admin, a, missing).json()["detail"]
    assert compare(client, admin, a, "not-a-uuid").status_code == 422
    assert client.get("/v1/benchmarks/compare", params={"a": a}, headers=admin).status_code == 422
    itself = compare(client, admin, a, a)
    assert (itself.status_code, itself.json()["code"]) == (409, "NOT_COMPARABLE")
    assert client.get("/v1/benchmarks/compare", params={"a": a, "b": a}).status_code == 401


def test_two_launches_on_different_targets_are_compared_with_a_note(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    a = record(client, admin, settings, sweep({"5,1,6": [(30, 10)] * 30}))
    b = record(client, admin, settings, sweep({"5,1,6": [(20, 10)] * 30}))
    with session_scope(settings) as session:
        job_id = client.get(f"/v1/benchmarks/{b}", headers=admin).json()["job_id"]
        params = {"mode": "sweep", "launch": {"model": "/models/other", "draft": "/d/b"}}
        session.execute(
            text("UPDATE job SET params=:p WHERE id=:id"), {"p": json.dumps(params), "id": job_id}
        )
    body = compare(client, admin, a, b).json()
    assert body["b"]["target"] == "/models/other"
    assert any("different targets" in note for note in body["notes"])


def test_past_the_bootstrap_s_reach_the_delta_method_gives_the_same_interval_in_one_pass() -> None:
    """A set may hold 100,000 prompts: past BOOTSTRAP_UP_TO the interval is the delta method's, which agrees
    with the bootstrap where both run (here within 0.005 on an interval 0.1 wide)."""
    rng = random.Random(3)

    def counts(shift: int, count: int) -> list[tuple[int, int]]:
        return [(100 + rng.randint(0, 50) + shift, 40 + rng.randint(0, 20)) for _ in range(count)]

    a, b = counts(5, paired.BOOTSTRAP_UP_TO), counts(0, paired.BOOTSTRAP_UP_TO)
    booted = paired.compare(sweep({"5,1,6": a}), sweep({"5,1,6": b}))
    assert booted["interval"].startswith("paired percentile bootstrap")
    a_counts = paired.Counts([t for t, _ in a], [s for _, s in a])
    b_counts = paired.Counts([t for t, _ in b], [s for _, s in b])
    low, high = paired._delta_method(a_counts, b_counts, booted["configs"][0]["difference"])
    assert booted["configs"][0]["ci_low"] == pytest.approx(low, abs=0.005)
    assert booted["configs"][0]["ci_high"] == pytest.approx(high, abs=0.005)
    assert 0 < low < high
    a.append(a[0])
    b.append(b[0])
    past = paired.compare(sweep({"5,1,6": a}), sweep({"5,1,6": b}))
    assert past["interval"].startswith("normal")
    assert past["configs"][0]["ci_low"] < past["configs"][0]["difference"] < past["configs"][0]["ci_high"]
