"""Pipelines over the API with the real database: validation, the chain of jobs, artifact passing, cancel
and retry. The steps are finished here through the same lifecycle functions a worker calls (the end-to-end
run with real stages and workers is tests/test_pipeline_e2e.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs import lifecycle
from app.jobs.lifecycle import Outcome
from app.jobs.states import JobState
from tests.app.test_jobs_api import register_host

Headers = dict[str, str]


@pytest.fixture(autouse=True)
def _spec_host_registered(settings: Settings) -> None:
    """The specs here name host gpu-a, registered as its worker would be (an unknown host is refused)."""
    register_host(settings, "gpu-a")


def spec(tmp: str, **extra: Any) -> dict[str, Any]:
    return {
        "template": "eagle3",
        "target": f"{tmp}/target",
        "data": f"{tmp}/data.jsonl",
        "workdir": f"{tmp}/runs",
        "host": "gpu-a",
        "extract": {"device": "cpu"},
        "train": {"device": "cpu", "draft_vocab_size": 64},
        "eval": {"device": "cpu", "depths": [2]},
        "benchmark": {"depths": [2], "launch": {"engine": "reference"}},
        **extra,
    }


def run_step(
    settings: Settings, job_id: str, *, ok: bool = True, artifact: tuple[str, str] | None = None
) -> None:
    """What a worker does: claim, run, record artifacts, finish."""
    with session_scope(settings) as session:
        claimed = lifecycle.claim(session, job_id=uuid.UUID(job_id), host="gpu-a", worker="test")
        assert claimed is not None
    with session_scope(settings) as session:  # no real process: a pid that cannot exist, marked reaped
        no_pid = 2**22 + 1
        lifecycle.mark_running(session, job_id=uuid.UUID(job_id), pid=no_pid, pgid=no_pid, create_time=0.0)
        lifecycle.mark_reaped(session, job_id=uuid.UUID(job_id))
    with session_scope(settings) as session:
        if artifact:
            lifecycle.record_artifact(
                session, job_id=uuid.UUID(job_id), host="gpu-a", kind=artifact[0], path=artifact[1], meta={}
            )
        state = JobState.SUCCEEDED if ok else JobState.FAILED
        lifecycle.finish(
            session,
            settings,
            job_id=uuid.UUID(job_id),
            outcome=Outcome(state, "SUCCEEDED" if ok else "NONZERO_EXIT", result={}),
        )


def test_a_pipeline_is_a_validated_chain_on_one_host(
    client: TestClient, admin: Headers, tmp_path: Any
) -> None:
    created = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=admin)
    assert created.status_code == 201, created.text
    pipeline = created.json()
    kinds = [j["kind"] for j in pipeline["jobs"]]
    assert kinds == ["extract", "train", "fix_keys", "gpu_check", "eval", "benchmark"]
    assert {j["host"] for j in pipeline["jobs"]} == {"gpu-a"}
    assert [j["state"] for j in pipeline["jobs"]] == ["queued"] + ["pending"] * 5
    assert pipeline["state"] == "queued"
    bench = pipeline["jobs"][-1]["params"]
    assert bench["mode"] == "sweep"
    assert bench["launch"]["draft"].endswith(f"{pipeline['id']}/sglang_draft")


def test_bad_step_params_refuse_the_whole_pipeline(client: TestClient, admin: Headers, tmp_path: Any) -> None:
    bad = client.post("/v1/pipelines", json=spec(str(tmp_path), train={"epochs": "many"}), headers=admin)
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "params.epochs"
    traversal = client.post("/v1/pipelines", json=spec("/tmp/../etc"), headers=admin)
    assert traversal.status_code == 422
    assert client.get("/v1/jobs", headers=admin).json()["items"] == []
    assert client.get("/v1/pipelines", headers=admin).json()["items"] == []


def test_artifacts_flow_to_the_next_step_and_retry_reuses_them(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    register_host(settings, "gpu-a")
    pipeline = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=admin).json()
    jobs = {j["kind"]: j for j in pipeline["jobs"]}
    run_step(settings, jobs["extract"]["id"], artifact=("hidden_states", "/elsewhere/hs"))
    train = client.get(f"/v1/jobs/{jobs['train']['id']}", headers=admin).json()
    assert train["state"] == "queued"
    assert train["params"]["data"] == "/elsewhere/hs"  # filled from the extract step's artifact
    run_step(settings, jobs["train"]["id"], artifact=("best_drafter", f"{tmp_path}/runs/epoch_1"))
    fix = client.get(f"/v1/jobs/{jobs['fix_keys']['id']}", headers=admin).json()
    assert fix["params"]["source"] == f"{tmp_path}/runs/epoch_1"
    run_step(settings, jobs["fix_keys"]["id"], ok=False)
    failed = client.get(f"/v1/pipelines/{pipeline['id']}", headers=admin).json()
    assert (failed["state"], failed["failed_step"]) == ("failed", "fix_keys")
    later = {j["kind"]: j["state"] for j in failed["jobs"]}
    assert later["benchmark"] == "failed"
    retried = client.post(f"/v1/pipelines/{pipeline['id']}/retry", headers=admin).json()
    assert retried["retries"] == 1
    new = {j["kind"]: j for j in retried["jobs"]}
    assert new["extract"]["id"] == jobs["extract"]["id"]  # succeeded steps are reused, not rerun
    assert new["train"]["id"] == jobs["train"]["id"]
    assert new["fix_keys"]["id"] != jobs["fix_keys"]["id"]
    assert new["fix_keys"]["state"] == "queued"
    assert new["fix_keys"]["params"]["source"] == f"{tmp_path}/runs/epoch_1"
    assert retried["state"] == "queued"
    again = client.post(f"/v1/pipelines/{pipeline['id']}/retry", headers=admin)
    assert again.status_code == 409


def test_cancel_stops_running_and_waiting_steps(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    register_host(settings, "gpu-a")
    pipeline = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=admin).json()
    extract = pipeline["jobs"][0]
    with session_scope(settings) as session:
        lifecycle.claim(session, job_id=uuid.UUID(extract["id"]), host="gpu-a", worker="test")
    cancelled = client.post(f"/v1/pipelines/{pipeline['id']}/cancel", headers=admin).json()
    states = [j["state"] for j in cancelled["jobs"]]
    assert states[0] == "cancelling"
    assert set(states[1:]) == {"cancelled"}
    assert cancelled["state"] == "cancelling"  # extract is still ending


def test_idempotency_key_on_pipelines(client: TestClient, admin: Headers, tmp_path: Any) -> None:
    key = {**admin, "Idempotency-Key": "ci-build-7"}
    first = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=key)
    again = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    other = client.post("/v1/pipelines", json=spec(str(tmp_path), train={"epochs": 3}), headers=key)
    assert other.status_code == 422
    assert other.json()["code"] == "IDEMPOTENCY_MISMATCH"
    assert len(client.get("/v1/pipelines", headers=admin).json()["items"]) == 1
    assert len(client.get("/v1/jobs", headers=admin).json()["items"]) == 6


def test_cancelling_a_pipeline_that_ended_is_a_409_like_a_job(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    register_host(settings, "gpu-a")
    pipeline = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=admin).json()
    produced = {
        "extract": ("hidden_states", f"{tmp_path}/hs"),
        "train": ("best_drafter", f"{tmp_path}/runs/epoch_1"),
        "fix_keys": ("sglang_checkpoint", f"{tmp_path}/runs/sglang_draft"),
    }
    for job in pipeline["jobs"]:
        run_step(settings, job["id"], artifact=produced.get(job["kind"]))
    done = client.get(f"/v1/pipelines/{pipeline['id']}", headers=admin).json()
    assert done["state"] == "succeeded", done
    refused = client.post(f"/v1/pipelines/{pipeline['id']}/cancel", headers=admin)
    assert refused.status_code == 409, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "INVALID_TRANSITION"
    assert "succeeded" in refused.json()["detail"]
    after = client.get(f"/v1/pipelines/{pipeline['id']}", headers=admin).json()
    assert after["state"] == "succeeded"
    assert [j["state"] for j in after["jobs"]] == ["succeeded"] * 6
    job_refused = client.post(f"/v1/jobs/{pipeline['jobs'][0]['id']}/cancel", headers=admin)
    assert job_refused.status_code == 409  # the same answer as for one of its jobs


def _from_prompts(tmp: str, **extra: Any) -> dict[str, Any]:
    body = spec(tmp, **extra)
    del body["data"]
    body["generate"] = {"prompts": f"{tmp}/train_prompts.jsonl", "engine": {"engine": "reference"}}
    body["eval"] = {**body["eval"], "prompts": "mtbench"}
    return body


def test_a_pipeline_can_start_from_prompts_and_keeps_eval_prompts_held_out(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    register_host(settings, "gpu-a")
    created = client.post("/v1/pipelines", json=_from_prompts(str(tmp_path)), headers=admin)
    assert created.status_code == 201, created.text
    pipeline = created.json()
    jobs = {j["kind"]: j for j in pipeline["jobs"]}
    assert [j["kind"] for j in pipeline["jobs"]][:2] == ["generate", "extract"]
    generate = jobs["generate"]["params"]
    assert generate["output"].endswith(f"{pipeline['id']}/conversations.jsonl")
    assert generate["holdout_prompts"] == ["mtbench"]  # the eval set is held out of training
    assert jobs["extract"]["params"]["data"] == generate["output"]
    run_step(settings, jobs["generate"]["id"], artifact=("conversations", "/elsewhere/chats.jsonl"))
    extract = client.get(f"/v1/jobs/{jobs['extract']['id']}", headers=admin).json()
    assert extract["state"] == "queued"
    assert extract["params"]["data"] == "/elsewhere/chats.jsonl"


def test_training_on_the_evaluation_prompts_is_refused(
    client: TestClient, admin: Headers, tmp_path: Any
) -> None:
    same = _from_prompts(str(tmp_path))
    same["generate"]["prompts"] = "mtbench"
    refused = client.post("/v1/pipelines", json=same, headers=admin)
    assert refused.status_code == 422
    assert "held out" in refused.text
    both = {**_from_prompts(str(tmp_path)), "data": f"{tmp_path}/data.jsonl"}
    assert client.post("/v1/pipelines", json=both, headers=admin).status_code == 422
    neither = spec(str(tmp_path))
    del neither["data"]
    assert client.post("/v1/pipelines", json=neither, headers=admin).status_code == 422
    assert client.get("/v1/jobs", headers=admin).json()["items"] == []


def test_fix_keys_reads_the_checkpoint_train_hands_on_not_the_newest_epoch(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    register_host(settings, "gpu-a")
    pipeline = client.post("/v1/pipelines", json=spec(str(tmp_path)), headers=admin).json()
    jobs = {j["kind"]: j for j in pipeline["jobs"]}
    run_step(settings, jobs["extract"]["id"], artifact=("hidden_states", f"{tmp_path}/hs"))
    runs = f"{tmp_path}/runs/train"
    with session_scope(settings) as session:  # what the stage records: one drafter per epoch, epoch 1 best
        for epoch in (1, 2, 3):
            lifecycle.record_artifact(
                session,
                job_id=uuid.UUID(jobs["train"]["id"]),
                host="gpu-a",
                kind="drafter",
                path=f"{runs}/epoch_{epoch}",
                meta={"epoch": epoch},
            )
    run_step(settings, jobs["train"]["id"], artifact=("best_drafter", f"{runs}/epoch_1"))
    fix = client.get(f"/v1/jobs/{jobs['fix_keys']['id']}", headers=admin).json()
    assert fix["state"] == "queued"
    assert fix["params"]["source"] == f"{runs}/epoch_1"  # the best, though epoch_3 is the newest drafter


def test_eval_asks_the_sweeps_requests_unless_told_otherwise(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    """Run 4 on the H200: eval named no prompts and measured the built-in set while the sweep asked MT-Bench,
    so its prediction sat beside a served figure of other requests. Now it asks what the sweep asks, at the
    sweep's chain depths; what eval names itself still wins."""
    configs = [{"steps": 5, "topk": 1, "draft_tokens": 6}, {"steps": 3, "topk": 1, "draft_tokens": 4},
               {"steps": 5, "topk": 4, "draft_tokens": 8}]  # fmt: skip
    swept = {"prompts": "mtbench", "max_prompts": 8, "max_new_tokens": 192, "ignore_eos": False,
             "configs": configs, "launch": {"engine": "sglang"}}  # fmt: skip
    body = spec(str(tmp_path), eval={"device": "cpu"}, benchmark=swept)
    register_host(settings, "gpu-a", gpus=1)  # SGLang serves on a GPU
    created = client.post("/v1/pipelines", json=body, headers=admin)
    assert created.status_code == 201, created.text
    evaluated = next(j for j in created.json()["jobs"] if j["kind"] == "eval")["params"]
    asked = ("prompts", "max_prompts", "max_new_tokens", "ignore_eos", "depths")
    assert {k: evaluated[k] for k in asked} == {
        "prompts": "mtbench", "max_prompts": 8, "max_new_tokens": 192, "ignore_eos": False, "depths": [3, 5]
    }  # fmt: skip
    own = spec(str(tmp_path), eval={"device": "cpu", "max_prompts": 4, "depths": [7]}, benchmark=swept)
    evaluated = next(j for j in client.post("/v1/pipelines", json=own, headers=admin).json()["jobs"]
                     if j["kind"] == "eval")["params"]  # fmt: skip
    assert (evaluated["max_prompts"], evaluated["depths"], evaluated["prompts"]) == (4, [7], "mtbench")


def _failed_at_train(client: TestClient, admin: Headers, settings: Settings, tmp: Any) -> dict[str, Any]:
    """A pipeline whose extract succeeded and whose train failed (GPU run 7: its compile broke)."""
    register_host(settings, "gpu-a")
    pipeline = client.post("/v1/pipelines", json=spec(str(tmp)), headers=admin).json()
    jobs = {j["kind"]: j for j in pipeline["jobs"]}
    run_step(settings, jobs["extract"]["id"], artifact=("hidden_states", "/elsewhere/hs"))
    run_step(settings, jobs["train"]["id"], ok=False)
    failed: dict[str, Any] = client.get(f"/v1/pipelines/{pipeline['id']}", headers=admin).json()
    assert (failed["state"], failed["failed_step"]) == ("failed", "train")
    return failed


def test_a_retry_can_change_the_failed_steps_params_in_a_fresh_folder(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    failed = _failed_at_train(client, admin, settings, tmp_path)
    pid = failed["id"]
    root = f"{tmp_path}/runs/{pid}"
    assert failed["run_root"] == root
    body = {"params": {"train": {"compile": False, "lr": 3e-4}}}
    retried = client.post(f"/v1/pipelines/{pid}/retry", json=body, headers=admin)
    assert retried.status_code == 200, retried.text
    after = retried.json()
    new = {j["kind"]: j for j in after["jobs"]}
    old = {j["kind"]: j for j in failed["jobs"]}
    assert new["extract"]["id"] == old["extract"]["id"]  # reused
    assert new["train"]["id"] != old["train"]["id"]
    assert new["train"]["params"]["compile"] is False
    assert new["train"]["params"]["lr"] == 3e-4
    assert new["train"]["params"]["draft_vocab_size"] == 64  # the spec's other train params stay
    assert new["train"]["params"]["data"] == "/elsewhere/hs"  # still filled from extract's artifact
    # the old train folder may hold a run with the old lr: the retried steps write elsewhere
    assert after["run_root"] == f"{root}/retry-1"
    assert new["train"]["params"]["output"] == f"{root}/retry-1/train"
    assert new["benchmark"]["params"]["launch"]["draft"] == f"{root}/retry-1/sglang_draft"
    assert after["spec"]["train"] == {"device": "cpu", "draft_vocab_size": 64, "compile": False, "lr": 3e-4}
    # a later plain retry stays in that folder (a killed train resumes there)
    run_step(settings, new["train"]["id"], ok=False)
    plain = client.post(f"/v1/pipelines/{pid}/retry", headers=admin).json()
    assert plain["run_root"] == f"{root}/retry-1"
    assert {j["kind"]: j for j in plain["jobs"]}["train"]["params"]["output"] == f"{root}/retry-1/train"


def test_a_succeeded_step_reruns_only_when_named(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    failed = _failed_at_train(client, admin, settings, tmp_path)
    pid = failed["id"]
    extract_id = {j["kind"]: j for j in failed["jobs"]}["extract"]["id"]
    body = {"from_step": "extract", "params": {"extract": {"batch_size": 4}}}
    retried = client.post(f"/v1/pipelines/{pid}/retry", json=body, headers=admin).json()
    new = {j["kind"]: j for j in retried["jobs"]}
    assert new["extract"]["id"] != extract_id
    assert new["extract"]["params"]["batch_size"] == 4
    assert new["extract"]["state"] == "queued"
    assert new["train"]["state"] == "pending"


def test_a_retry_that_cannot_be_honoured_changes_nothing(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    failed = _failed_at_train(client, admin, settings, tmp_path)
    url = f"/v1/pipelines/{failed['id']}/retry"
    refused = {
        "skips the failed step": {"from_step": "fix_keys"},
        "unknown step": {"from_step": "deploy"},
        "a kept step's params": {"params": {"extract": {"batch_size": 4}}},
        "bad param value": {"params": {"train": {"epochs": "many"}}},
        "unknown section": {"params": {"target": {"x": 1}}},
        "unknown field": {"from": "train"},
        "a spec that no longer validates": {"from_step": "extract", "params": {"generate": {"limit": 1}}},
    }
    answers = {case: client.post(url, json=body, headers=admin) for case, body in refused.items()}
    for case, answer in answers.items():
        assert answer.status_code == 422, (case, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json"), case
    assert "set from_step to extract or earlier" in answers["a kept step's params"].json()["detail"]
    assert "failed at train" in answers["skips the failed step"].json()["detail"]
    invalid = answers["a spec that no longer validates"].json()
    assert invalid["detail"].startswith("the retried spec is invalid: ")
    assert "exactly one of `data`" in invalid["detail"]
    unchanged = client.get(f"/v1/pipelines/{failed['id']}", headers=admin).json()
    assert unchanged["retries"] == 0
    assert unchanged["spec"] == failed["spec"]
    assert [j["id"] for j in unchanged["jobs"]] == [j["id"] for j in failed["jobs"]]
    assert unchanged["run_root"] == failed["run_root"]


def test_a_stored_pipeline_without_a_workdir_never_breaks_a_listing(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    """A row written by an older eyas, or by hand, with a spec this one cannot plan: reads still answer, and
    a retry is refused with a reason instead of a 500."""
    from app.models.base import utcnow
    from app.models.pipeline import Pipeline

    odd = uuid.uuid4()
    with session_scope(settings) as session:
        session.add(Pipeline(id=odd, template="eagle3", spec={}, retries=0, created_at=utcnow()))
    listed = client.get("/v1/pipelines", headers=admin)
    assert listed.status_code == 200, listed.text
    assert [p["run_root"] for p in listed.json()["items"] if p["id"] == str(odd)] == [None]
    assert client.get(f"/v1/pipelines/{odd}", headers=admin).status_code == 200
    refused = client.post(f"/v1/pipelines/{odd}/retry", json={"from_step": "train"}, headers=admin)
    assert 400 <= refused.status_code < 500, refused.text
