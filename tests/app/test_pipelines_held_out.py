"""A pipeline's held-out validation set (`held_out`): two more steps (generate_held_out, extract_held_out)
whose extraction train validates on, prompts kept apart from training and from evaluation, and a pipeline
with two jobs of one kind listed, read, failed and retried by step name. Real database; the steps are
finished through the lifecycle functions a worker calls (as in test_pipelines_api.py)."""

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
from tests.app.test_pipeline_acceptance import EVAL, chain_row
from tests.app.test_pipelines_api import run_step, spec

Headers = dict[str, str]


@pytest.fixture(autouse=True)
def _spec_host_registered(settings: Settings) -> None:
    """The specs here name host gpu-a, registered as its worker would be (an unknown host is refused)."""
    register_host(settings, "gpu-a")


STEPS = [
    "generate",
    "generate_held_out",
    "extract",
    "extract_held_out",
    "train",
    "fix_keys",
    "gpu_check",
    "eval",
    "benchmark",
]


def held_out_spec(tmp: str, **extra: Any) -> dict[str, Any]:
    body = spec(tmp, **extra)
    del body["data"]
    body["generate"] = {
        "prompts": f"{tmp}/train_prompts.jsonl",
        "engine": {"engine": "reference"},
        "temperature": 0.0,
        "max_new_tokens": 64,
        "limit": 100,
        "holdout_prompts": [f"{tmp}/other_eval.jsonl"],
    }
    body["eval"] = {**body["eval"], "prompts": "mtbench"}
    body["benchmark"] = {**body["benchmark"], "prompts": f"{tmp}/bench.jsonl"}
    body["held_out"] = {"prompts": f"{tmp}/traffic.jsonl", "limit": 40}
    return body


def finish(settings: Settings, job_id: str, result: dict[str, Any]) -> None:
    """run_step with a result: what the stage reported."""
    with session_scope(settings) as session:
        lifecycle.claim(session, job_id=uuid.UUID(job_id), host="gpu-a", worker="test")
    with session_scope(settings) as session:
        no_pid = 2**22 + 1
        lifecycle.mark_running(session, job_id=uuid.UUID(job_id), pid=no_pid, pgid=no_pid, create_time=0.0)
        lifecycle.mark_reaped(session, job_id=uuid.UUID(job_id))
    with session_scope(settings) as session:
        lifecycle.finish(
            session,
            settings,
            job_id=uuid.UUID(job_id),
            outcome=Outcome(JobState.SUCCEEDED, "SUCCEEDED", result=result),
        )


def served_pipeline(
    client: TestClient, admin: Headers, settings: Settings, tmp: str
) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    """A held-out pipeline with `serve`, made through the API on a registered host, and the artifact each step
    before train reports when run_step finishes it."""
    register_host(settings, "gpu-a")
    body = held_out_spec(tmp)
    body["held_out"]["serve"] = True
    pipeline = client.post("/v1/pipelines", json=body, headers=admin).json()
    produced = {
        "generate": ("conversations", f"{tmp}/c.jsonl"),
        "generate_held_out": ("conversations", f"{tmp}/h.jsonl"),
        "extract": ("hidden_states", f"{tmp}/hs"),
        "extract_held_out": ("hidden_states", f"{tmp}/hhs"),
        "fix_keys": ("sglang_checkpoint", f"{tmp}/draft"),
    }
    return pipeline, produced


def test_held_out_adds_a_generate_and_an_extract_step_whose_extraction_train_validates_on(
    client: TestClient, admin: Headers, tmp_path: Any
) -> None:
    tmp = str(tmp_path)
    created = client.post("/v1/pipelines", json=held_out_spec(tmp), headers=admin)
    assert created.status_code == 201, created.text
    pipeline = created.json()
    root = f"{tmp}/runs/{pipeline['id']}"
    assert [j["pipeline_step"] for j in pipeline["jobs"]] == STEPS
    assert [j["kind"] for j in pipeline["jobs"]][:5] == [
        "generate",
        "generate",
        "extract",
        "extract",
        "train",
    ]
    jobs = {j["pipeline_step"]: j for j in pipeline["jobs"]}
    trained, validated = jobs["generate"]["params"], jobs["generate_held_out"]["params"]
    # training never sees a validation or evaluation prompt
    assert trained["holdout_prompts"] == [f"{tmp}/other_eval.jsonl", "mtbench", f"{tmp}/bench.jsonl",
                                          f"{tmp}/traffic.jsonl"]  # fmt: skip
    assert (trained["prompts"], trained["limit"]) == (f"{tmp}/train_prompts.jsonl", 100)
    # the validation set: its own prompts, the same target, engine and answer sampling, no eval prompt in it
    assert validated["prompts"] == f"{tmp}/traffic.jsonl"
    assert validated["output"] == f"{root}/held_out.jsonl"
    assert validated["limit"] == 40
    assert validated["holdout_prompts"] == ["mtbench", f"{tmp}/bench.jsonl"]
    assert validated["self_prompts"] is None
    same = ("target", "engine", "temperature", "top_p", "seed", "max_new_tokens", "multi_turn", "concurrency")
    assert {k: validated[k] for k in same} == {k: trained[k] for k in same}
    assert validated["max_new_tokens"] == 64
    extract, held_out = jobs["extract"]["params"], jobs["extract_held_out"]["params"]
    assert held_out["data"] == f"{root}/held_out.jsonl"
    assert held_out["output"] == f"{root}/held_out_states"
    assert {k: v for k, v in held_out.items() if k not in ("data", "output")} == {
        k: v for k, v in extract.items() if k not in ("data", "output")
    }
    assert extract["data"] == f"{root}/conversations.jsonl"
    train = jobs["train"]["params"]
    assert (train["data"], train["held_out_data"]) == (f"{root}/hidden_states", f"{root}/held_out_states")
    # one chain, one GPU step after the other
    assert [j["state"] for j in pipeline["jobs"]] == ["queued"] + ["pending"] * 8


def test_without_held_out_the_plan_is_as_before(client: TestClient, admin: Headers, tmp_path: Any) -> None:
    body = held_out_spec(str(tmp_path))
    del body["held_out"]
    pipeline = client.post("/v1/pipelines", json=body, headers=admin).json()
    assert [j["pipeline_step"] for j in pipeline["jobs"]] == [s for s in STEPS if "held_out" not in s]
    jobs = {j["pipeline_step"]: j for j in pipeline["jobs"]}
    assert jobs["train"]["params"]["held_out_data"] is None
    assert f"{tmp_path}/traffic.jsonl" not in jobs["generate"]["params"]["holdout_prompts"]


def test_held_out_prompts_must_stay_apart_and_need_generate(
    client: TestClient, admin: Headers, tmp_path: Any
) -> None:
    tmp = str(tmp_path)

    def refused(body: dict[str, Any], words: str) -> None:
        answer = client.post("/v1/pipelines", json=body, headers=admin)
        assert answer.status_code == 422, answer.text
        assert words in answer.text, answer.text

    with_data = spec(tmp, held_out={"prompts": f"{tmp}/traffic.jsonl"})
    refused(with_data, "held_out.prompts needs `generate`")
    as_training = held_out_spec(tmp)
    as_training["held_out"]["prompts"] = f"{tmp}/./train_prompts.jsonl"  # the same file, spelled otherwise
    refused(as_training, "held_out.prompts is also generate.prompts")
    as_eval = held_out_spec(tmp)
    as_eval["eval"]["prompts"] = f"{tmp}/traffic.jsonl"
    refused(as_eval, "held_out.prompts is also eval.prompts")
    as_bench = held_out_spec(tmp)
    as_bench["held_out"]["prompts"] = f"{tmp}/bench.jsonl"
    refused(as_bench, "held_out.prompts is also benchmark.prompts")
    both = held_out_spec(tmp)
    both["train"] = {**both["train"], "held_out_data": f"{tmp}/mine"}
    refused(both, "not both")
    refused({**held_out_spec(tmp), "held_out": {}}, "prompts")
    refused({**held_out_spec(tmp), "held_out": {"prompts": f"{tmp}/t.jsonl", "engine": {}}}, "engine")
    refused({**held_out_spec(tmp), "held_out": {"prompts": "relative.jsonl"}}, "held_out")
    assert client.get("/v1/jobs", headers=admin).json()["items"] == []


def test_two_jobs_of_one_kind_pass_artifacts_fail_and_retry_by_step_name(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    register_host(settings, "gpu-a")
    tmp = str(tmp_path)
    pipeline = client.post("/v1/pipelines", json=held_out_spec(tmp), headers=admin).json()
    jobs = {j["pipeline_step"]: j for j in pipeline["jobs"]}
    run_step(settings, jobs["generate"]["id"], artifact=("conversations", f"{tmp}/made/train.jsonl"))
    run_step(settings, jobs["generate_held_out"]["id"], artifact=("conversations", f"{tmp}/made/held.jsonl"))
    extract = client.get(f"/v1/jobs/{jobs['extract']['id']}", headers=admin).json()
    assert (extract["state"], extract["params"]["data"]) == ("queued", f"{tmp}/made/train.jsonl")
    run_step(settings, jobs["extract"]["id"], artifact=("hidden_states", f"{tmp}/made/hs"))
    held = client.get(f"/v1/jobs/{jobs['extract_held_out']['id']}", headers=admin).json()
    assert (held["state"], held["params"]["data"]) == ("queued", f"{tmp}/made/held.jsonl")
    run_step(settings, jobs["extract_held_out"]["id"], ok=False)
    failed = client.get(f"/v1/pipelines/{pipeline['id']}", headers=admin).json()
    assert (failed["state"], failed["failed_step"]) == ("failed", "extract_held_out")
    assert [j["pipeline_step"] for j in failed["jobs"]] == STEPS  # both generate jobs, both extract jobs
    listed = client.get("/v1/pipelines", headers=admin).json()["items"]
    assert [j["pipeline_step"] for j in listed[0]["jobs"]] == STEPS
    assert listed[0]["failed_step"] == "extract_held_out"

    retried = client.post(f"/v1/pipelines/{pipeline['id']}/retry", headers=admin).json()
    again = {j["pipeline_step"]: j for j in retried["jobs"]}
    assert [j["pipeline_step"] for j in retried["jobs"]] == STEPS
    for kept in ("generate", "generate_held_out", "extract"):
        assert again[kept]["id"] == jobs[kept]["id"]  # succeeded steps are reused, not rerun
    assert again["extract_held_out"]["id"] != jobs["extract_held_out"]["id"]
    assert again["extract_held_out"]["state"] == "queued"  # its dependencies already succeeded
    assert again["extract_held_out"]["params"]["data"] == f"{tmp}/made/held.jsonl"
    assert retried["state"] == "queued"
    run_step(settings, again["extract_held_out"]["id"], artifact=("hidden_states", f"{tmp}/made/held_hs"))
    train = client.get(f"/v1/jobs/{again['train']['id']}", headers=admin).json()
    assert train["state"] == "queued"
    assert (train["params"]["data"], train["params"]["held_out_data"]) == (
        f"{tmp}/made/hs",
        f"{tmp}/made/held_hs",
    )


def test_the_acceptance_table_takes_the_held_out_estimate(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    tmp = str(tmp_path)
    pipeline, produced = served_pipeline(client, admin, settings, tmp)
    epoch = {"epoch": 1, "val/est_accept_len_d2": 2.4, "held_out/est_accept_len_d2": 1.8}
    results = {
        "train": {"epochs": [epoch], "best": {"epoch": 1, "checkpoint": "/e1"}, "selected": "/e1"},
        "eval": {"depths": [{**EVAL["depths"][0], "depth": 2}]},
        "serve_held_out": {"engine": "reference", "rows": [chain_row(2, 1.75)]},
        "benchmark": {"engine": "reference", "rows": [chain_row(2, 1.5)]},
    }
    for job in pipeline["jobs"]:
        step = job["pipeline_step"]
        if step == "train":
            with session_scope(settings) as session:
                lifecycle.record_artifact(
                    session,
                    job_id=uuid.UUID(job["id"]),
                    host="gpu-a",
                    kind="best_drafter",
                    path="/e1",
                    meta={},
                )
        if step in produced:
            run_step(settings, job["id"], artifact=produced[step])
        else:
            finish(settings, job["id"], results.get(step, {}))
    done = client.get(f"/v1/pipelines/{pipeline['id']}", headers=admin).json()
    assert done["state"] == "succeeded", done
    acceptance = done["acceptance"]
    assert acceptance["sources"]["train"].startswith("held_out/est_accept_len_d{N}")
    row = acceptance["by_depth"][0]
    assert (row["depth"], row["train_estimate"], row["served"]) == (2, 1.8, 1.5)
    assert row["train_error"] == round((1.8 - 1.5) / 1.5, 4)
    assert (row["served_held_out"], row["train_error_held_out"]) == (1.75, round((1.8 - 1.75) / 1.75, 4))
    served = next(j for j in done["jobs"] if j["pipeline_step"] == "serve_held_out")
    assert served["params"]["prompts"] == f"{tmp}/h.jsonl"  # generate_held_out's artifact, filled in


def test_held_out_conversations_already_answered_are_extracted_and_served_as_they_are(
    client: TestClient, admin: Headers, tmp_path: Any
) -> None:
    """held_out.conversations (an earlier pipeline's held_out.jsonl): no generate_held_out, with `data` as
    with `generate`; served with the budget the spec names, since no generate step says it."""
    tmp = str(tmp_path)
    given = f"{tmp}/earlier/held_out.jsonl"
    body = spec(tmp, held_out={"conversations": given, "serve": True, "max_new_tokens": 384})
    answer = client.post("/v1/pipelines", json=body, headers=admin)
    assert answer.status_code == 201, answer.text
    jobs = {j["pipeline_step"]: j for j in answer.json()["jobs"]}
    assert list(jobs) == ["extract", "extract_held_out", "train", "fix_keys", "gpu_check", "eval",
                          "serve_held_out", "benchmark"]  # fmt: skip
    held, extract = jobs["extract_held_out"]["params"], jobs["extract"]["params"]
    assert (held["data"], extract["data"]) == (given, body["data"])
    assert jobs["train"]["params"]["held_out_data"] == held["output"]
    served = jobs["serve_held_out"]["params"]
    assert (served["prompts"], served["max_new_tokens"], served["ignore_eos"]) == (given, 384, False)
    with_generate = held_out_spec(tmp)
    with_generate["held_out"] = {"conversations": given}
    made = client.post("/v1/pipelines", json=with_generate, headers=admin).json()
    steps = [j["pipeline_step"] for j in made["jobs"]]
    assert "generate_held_out" not in steps
    assert "extract_held_out" in steps
    trained = next(j for j in made["jobs"] if j["pipeline_step"] == "generate")["params"]
    assert given in trained["holdout_prompts"]  # a training prompt equal to a held-out one is dropped


def test_held_out_conversations_refuse_what_cannot_hold(
    client: TestClient, admin: Headers, tmp_path: Any
) -> None:
    tmp = str(tmp_path)
    given = f"{tmp}/earlier/held_out.jsonl"

    def refused(held_out: dict[str, Any], words: str, **extra: Any) -> None:
        answer = client.post("/v1/pipelines", json=spec(tmp, held_out=held_out, **extra), headers=admin)
        assert answer.status_code == 422, answer.text
        assert words in answer.text, answer.text

    refused({"conversations": given, "prompts": f"{tmp}/p.jsonl"}, "exactly one of held_out.prompts")
    refused({"serve": True}, "exactly one of held_out.prompts")
    refused({"conversations": given, "limit": 5}, "extracted whole")
    refused({"conversations": given, "serve": True}, "needs held_out.max_new_tokens")
    refused({"conversations": f"{tmp}/./data.jsonl"}, "held_out.conversations is also data")
    refused(
        {"conversations": f"{tmp}/bench.jsonl"},
        "is also benchmark.prompts",
        benchmark={"prompts": f"{tmp}/bench.jsonl"},
    )
    refused({"conversations": given, "max_new_tokens": 0}, "max_new_tokens")
    assert client.get("/v1/jobs", headers=admin).json()["items"] == []


def test_serving_the_held_out_prompts_adds_an_acceptance_pass_before_the_sweep(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    """held_out.serve: serve_held_out, a benchmark job on the held-out prompts as generate answered them
    (its max_new_tokens, ending at their end of turn), at the sweep's chain depths, judging no speed."""
    tmp = str(tmp_path)
    body = held_out_spec(tmp)
    body["held_out"]["serve"] = True
    body["benchmark"] = {
        **body["benchmark"],
        "depths": None,
        "configs": [{"steps": 5, "topk": 1, "draft_tokens": 6}, {"steps": 5, "topk": 4, "draft_tokens": 8}],
        "repeats": 2,
        "chosen_depth": 5,
        "launch": {"engine": "sglang"},  # the reference engine drafts chains only
    }
    del body["benchmark"]["depths"]
    register_host(settings, "gpu-a", gpus=1)  # SGLang serves on a GPU
    answer = client.post("/v1/pipelines", json=body, headers=admin)
    assert answer.status_code == 201, answer.text
    pipeline = answer.json()
    steps = [j["pipeline_step"] for j in pipeline["jobs"]]
    assert steps == [*STEPS[:-1], "serve_held_out", "benchmark"]
    served = next(j for j in pipeline["jobs"] if j["pipeline_step"] == "serve_held_out")
    assert served["kind"] == "benchmark"
    params = served["params"]
    # the records train validated on (generate_held_out's output), not the first `limit` lines of the prompts
    root = f"{tmp}/runs/{pipeline['id']}"
    assert (params["prompts"], params["max_prompts"]) == (f"{root}/held_out.jsonl", 100_000)
    assert (params["max_new_tokens"], params["ignore_eos"], params["concurrency"]) == (64, False, 8)
    assert (params["depths"], params["repeats"], params["speedup_threshold"]) == ([5], 2, 0.0)
    assert params["configs"] is None  # the chain depths, not the tree
    assert params["chosen_depth"] is None
    assert params["launch"]["engine"] == "sglang"
    sweep = next(j for j in pipeline["jobs"] if j["pipeline_step"] == "benchmark")["params"]
    assert sweep["prompts"] == f"{tmp}/bench.jsonl"
    assert sweep["chosen_depth"] == 5
    plain = client.post("/v1/pipelines", json=held_out_spec(tmp), headers=admin).json()
    assert "serve_held_out" not in [j["pipeline_step"] for j in plain["jobs"]]


def test_a_retry_reruns_serve_held_out_only_when_its_params_change(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Any
) -> None:
    """The sweep's gate threshold or its prompts are not serve_held_out's (it sets its own): a sweep refused
    by the gate is retried alone, the ~3 minutes of serving the held-out set kept. `repeats` it copies: a
    change there must run it again, and a retry that would not is refused with the step to start from."""
    tmp = str(tmp_path)
    pipeline, produced = served_pipeline(client, admin, settings, tmp)
    produced["train"] = ("best_drafter", f"{tmp}/e1")
    for job in pipeline["jobs"]:
        step = job["pipeline_step"]
        run_step(settings, job["id"], ok=step != "benchmark", artifact=produced.get(step))
    failed = client.get(f"/v1/pipelines/{pipeline['id']}", headers=admin).json()
    assert failed["failed_step"] == "benchmark"
    served_id = next(j["id"] for j in failed["jobs"] if j["pipeline_step"] == "serve_held_out")
    url = f"/v1/pipelines/{pipeline['id']}/retry"

    copied = client.post(url, json={"params": {"benchmark": {"repeats": 5}}}, headers=admin)
    assert copied.status_code == 422, copied.text
    assert "params.benchmark changes serve_held_out" in copied.json()["detail"]
    assert "set from_step to serve_held_out" in copied.json()["detail"]

    # eval asks the sweep's requests unless it names its own: fewer sweep prompts would change it too
    asked = client.post(url, json={"params": {"benchmark": {"max_prompts": 4}}}, headers=admin)
    assert asked.status_code == 422, asked.text
    assert "params.benchmark changes eval" in asked.json()["detail"]

    gate_only = {"params": {"benchmark": {"speedup_threshold": 1.05}}}
    retried = client.post(url, json=gate_only, headers=admin)
    assert retried.status_code == 200, retried.text
    jobs = {j["pipeline_step"]: j for j in retried.json()["jobs"]}
    assert jobs["serve_held_out"]["id"] == served_id  # kept, not served again
    assert jobs["eval"]["id"] == next(j["id"] for j in failed["jobs"] if j["pipeline_step"] == "eval")
    sweep = jobs["benchmark"]
    assert (sweep["params"]["speedup_threshold"], sweep["state"]) == (1.05, "queued")
