"""A whole eagle3 pipeline on CPU through real workers: a tiny constructed target, real extraction and
training, the real converter and doctor, offline eval and a depth sweep against the reference engine.
Acceptance figures from these toy models are plumbing checks, not quality claims."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from cli.demo.constructed import chat_prompt, demo_pipeline_spec
from tests.conftest import WorkerProcess
from tests.test_cli import eyas
from testsupport.tiny_targets import chat, successor_target, write_jsonl

Headers = dict[str, str]


def pipeline_spec(root: Path, **overrides: Any) -> dict[str, Any]:
    """The demo's pipeline (`eyas demo`), on the host the test's worker serves."""
    assets = {
        "target": str(root / "target"),
        "data": str(root / "chats.jsonl"),
        "prompts": str(root / "p.jsonl"),
    }
    spec = demo_pipeline_spec(assets, workdir=str(root / "runs"))
    return {**spec, "host": "cpu-box", **overrides}


@pytest.fixture
def workspace(settings: Settings) -> Path:
    root = settings.allowed_roots[0] / f"e2e-{time.monotonic_ns()}"
    root.mkdir()
    successor_target(root / "target")
    rng = random.Random(0)
    write_jsonl(root / "chats.jsonl", [chat(rng, turns=2, words=12) for _ in range(48)])
    write_jsonl(  # chat turns, as the demo asks (cli.demo.constructed.chat_prompt says why)
        root / "p.jsonl",
        [chat_prompt(" ".join(f"w{rng.randrange(40)}" for _ in range(12))) for _ in range(4)],
    )
    return root


def wait_pipeline(
    client: TestClient, headers: Headers, pipeline_id: str, timeout: float = 840
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pipeline = client.get(f"/v1/pipelines/{pipeline_id}", headers=headers).json()
        if pipeline["state"] in ("succeeded", "failed", "cancelled"):
            return pipeline
        time.sleep(1)
    raise AssertionError(
        f"pipeline still {pipeline['state']}: {[(j['kind'], j['state']) for j in pipeline['jobs']]}"
    )


# The whole journey (extract, train, eval, a sweep with a smoke check per server) takes ~2 min alone on 2
# cores and more when they are shared: the suite's 300 s default would fail it for load, not for a fault.
@pytest.mark.timeout(900)
def test_eagle3_pipeline_end_to_end_with_lineage(
    client: TestClient, admin: Headers, workspace: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("cpu-box")
    created = client.post("/v1/pipelines", json=pipeline_spec(workspace), headers=admin)
    assert created.status_code == 201, created.text
    done = wait_pipeline(client, admin, created.json()["id"])
    failures = {
        j["kind"]: (j["termination_reason"], j["message"]) for j in done["jobs"] if j["state"] != "succeeded"
    }
    assert done["state"] == "succeeded", failures
    jobs = {j["pipeline_step"]: j for j in done["jobs"]}
    assert list(jobs) == ["extract", "train", "fix_keys", "gpu_check", "eval", "benchmark"]
    bench = jobs["benchmark"]["result"]
    assert bench["gate"]["deployable"] is True
    depths = {row["depth"]: row for row in bench["rows"]}
    assert depths[5]["outputs_match"] is True  # speculative greedy output equals the baseline's
    assert depths[5]["accept_len"] > 2.0, bench["rows"]  # the drafter learned the successor rule
    # acceptance by depth, side by side: training's estimate, eval's figure, the engine's own (errors vs it)
    acceptance = done["acceptance"]
    assert acceptance["engine"] == "reference"
    by_depth = {row["depth"]: row for row in acceptance["by_depth"]}
    assert sorted(by_depth) == [3, 5]
    evaluated = {d["depth"]: d["accept_length_meta"] for d in jobs["eval"]["result"]["depths"]}
    for depth, row in by_depth.items():
        assert row["eval"] == pytest.approx(evaluated[depth], abs=1e-4)
        assert row["served"] == pytest.approx(depths[depth]["accept_len"], abs=1e-4)
        assert row["eval_error"] == pytest.approx((row["eval"] - row["served"]) / row["served"], abs=1e-3)
    # training unrolls 3 TTT steps here: an estimate exists up to depth 3 and no further (none is made up)
    assert by_depth[3]["train_estimate"] > 1.0
    assert by_depth[3]["train_error"] is not None
    assert by_depth[5]["train_estimate"] is None
    stored = client.get("/v1/benchmarks", params={"job_id": jobs["benchmark"]["id"]}, headers=admin).json()[
        "items"
    ]
    assert stored[0]["deployable"] is True
    # lineage: the SGLang-ready checkpoint leads back through the drafter to the hidden states
    fixed = client.get("/v1/artifacts", params={"job_id": jobs["fix_keys"]["id"]}, headers=admin).json()[
        "items"
    ]
    lineage = client.get(f"/v1/artifacts/{fixed[0]['id']}", headers=admin).json()
    assert [a["kind"] for a in lineage["ancestors"]] == ["best_drafter", "hidden_states"]
    assert lineage["ancestors"][1]["job_id"] == jobs["extract"]["id"]
    metrics = client.get(f"/v1/jobs/{jobs['train']['id']}/metrics", headers=admin).json()
    assert any("loss" in m["name"] for m in metrics)


def test_cancel_midway_then_retry_reuses_what_succeeded(
    client: TestClient,
    admin: Headers,
    settings: Settings,
    api_server: str,
    workspace: Path,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    start_worker("cpu-box")
    spec = pipeline_spec(workspace, train={**pipeline_spec(workspace)["train"], "epochs": 50})
    pipeline_id = client.post("/v1/pipelines", json=spec, headers=admin).json()["id"]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        steps = {
            j["pipeline_step"]: j
            for j in client.get(f"/v1/pipelines/{pipeline_id}", headers=admin).json()["jobs"]
        }
        if steps["train"]["state"] == "running":
            break
        time.sleep(0.5)
    cancelled = client.post(f"/v1/pipelines/{pipeline_id}/cancel", headers=admin).json()
    assert cancelled["state"] == "cancelling"  # train's process group is being ended
    ended = wait_pipeline(client, admin, pipeline_id, timeout=60)
    steps = {j["pipeline_step"]: j for j in ended["jobs"]}
    assert (steps["extract"]["state"], steps["train"]["state"]) == ("succeeded", "cancelled")
    assert steps["benchmark"]["state"] == "cancelled"
    # the CLI a user would reach for: run train again with fewer epochs (the cancelled one left a run of
    # 50 epochs in its folder, which a changed run must not resume: it goes to a fresh one)
    token = admin["Authorization"].split()[1]
    cli = eyas(
        settings, api_server, token, "pipeline", "retry", pipeline_id, "--set", "train.epochs=1", "--json"
    )
    assert cli.returncode == 0, cli.stderr
    retried = json.loads(cli.stdout)
    again = {j["pipeline_step"]: j for j in retried["jobs"]}
    assert again["extract"]["id"] == steps["extract"]["id"]  # the hidden states are reused, not recomputed
    assert again["train"]["id"] != steps["train"]["id"]
    assert again["train"]["params"]["data"] == steps["train"]["params"]["data"]
    assert again["train"]["params"]["epochs"] == 1
    assert again["train"]["params"]["output"] == f"{retried['run_root']}/train"
    assert retried["run_root"].endswith(f"{pipeline_id}/retry-1")
    deadline = time.monotonic() + 240
    while (train := client.get(f"/v1/jobs/{again['train']['id']}", headers=admin).json())["state"] not in (
        "succeeded",
        "failed",
        "cancelled",
    ) and time.monotonic() < deadline:
        time.sleep(1)
    assert train["state"] == "succeeded", train
    assert train["result"]["epochs_done"] == 1
    assert (Path(retried["run_root"]) / "train" / "epoch_1").is_dir()
    client.post(f"/v1/pipelines/{pipeline_id}/cancel", headers=admin)
