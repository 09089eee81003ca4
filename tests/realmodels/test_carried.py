"""bench/gpu/carried.py: a GPU run's generated conversations saved to OUT in parts (whole, or as they stand
when a call ends first), carried back, completed by generate jobs with the pipeline step's own params, and a
pipeline spec that starts from them (no generate step), as the API validates and plans it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

import carried
from real_model import pipeline_spec

from app.core.config import Settings
from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan
from contract.params.train import TrainParams
from tests.app.test_jobs_api import job_count, register_host


def conversations(path: Path, count: int) -> Path:
    rows = [
        {"id": str(i), "messages": [{"role": "user", "content": f"q{i} " * 40},
                                    {"role": "assistant", "content": f"answer {i} " * 300}]}
        for i in range(count)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pipeline(tmp: Path, generate_state: str, held_out_state: str) -> dict[str, object]:
    """The jobs of GET /v1/pipelines/ID as the saver reads them: a result only once succeeded."""
    jobs = []
    for step, path, count, state in (("generate", tmp / "c.jsonl", 300, generate_state),
                                     ("generate_held_out", tmp / "h.jsonl", 7, held_out_state)):  # fmt: skip
        if state != "pending":  # a pending step has not opened its output yet
            conversations(path, count)
        done = {"output": str(path)} if state == "succeeded" else None
        job = {"pipeline_step": step, "kind": "generate", "state": state, "params": {"output": str(path)}}
        jobs.append(job | {"result": done})
    jobs.append(
        {"pipeline_step": "extract", "kind": "extract", "state": "pending", "params": {}, "result": None}
    )
    return {"jobs": jobs}


def test_generated_conversations_leave_in_parts_and_come_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(carried, "PART_BYTES", 4096)  # the device's 16 MiB limit, scaled to a small file
    out = tmp_path / "out"
    saver = carried.GeneratedSaver(out)
    saver(pipeline(tmp_path, "succeeded", "running"))
    assert not out.exists()  # the held-out answers are not done yet: nothing half saved
    saver(pipeline(tmp_path, "succeeded", "succeeded"))
    parts = sorted(p.name for p in out.iterdir())
    assert len([p for p in parts if p.startswith("conversations.jsonl.gz.part")]) >= 2
    assert "held_out.jsonl.gz.part0" in parts
    assert all((out / p).stat().st_size <= 4096 for p in parts)
    found = carried.unpack(out, tmp_path / "work")
    assert found.training.read_bytes() == (tmp_path / "c.jsonl").read_bytes()
    assert found.held_out.read_bytes() == (tmp_path / "h.jsonl").read_bytes()
    assert (found.training_complete, found.held_out_complete) == (True, True)
    assert found.training.parent == tmp_path / "work" / "carried"  # inside the host's allowed root
    (out / "conversations.jsonl.gz.part1").unlink()  # a part left behind: refused, not a short file
    with pytest.raises(Exception, match="CRC|Compressed|end-of-stream|invalid"):
        carried.unpack(out, tmp_path / "again")
    with pytest.raises(SystemExit, match="no conversations.jsonl.gz.part"):
        carried.unpack(tmp_path / "work", tmp_path / "empty")


def test_a_carried_spec_is_the_gpu_recipe_on_data_with_answered_held_out_conversations(
    tmp_path: Path,
) -> None:
    spec = pipeline_spec(
        tmp_path, tmp_path / "mtbench_eval.jsonl", 16000, 10, held_out=tmp_path / "q.jsonl", eval_step=False
    )  # as `start --no-eval` posts it
    training, held_out = tmp_path / "carried" / "conversations.jsonl", tmp_path / "carried" / "held_out.jsonl"
    training.parent.mkdir()
    conversations(training, 3)
    body = carried.carried_spec(spec, training, held_out, answer_tokens=384)
    assert "generate" not in body
    assert {k: v for k, v in body.items() if k not in ("data", "held_out")} == {
        k: v for k, v in spec.items() if k not in ("generate", "held_out")
    }
    plan = {step.step: step for step in eagle3_plan(Eagle3PipelineCreate(**body), str(tmp_path / "runs/p"))}
    assert list(plan) == ["extract", "extract_held_out", "train", "fix_keys", "gpu_check", "serve_held_out",
                          "benchmark"]  # fmt: skip
    assert (plan["extract"].params["data"], plan["extract_held_out"].params["data"]) == (
        str(training),
        str(held_out),
    )
    served = plan["serve_held_out"].params
    assert (served["prompts"], served["max_new_tokens"], served["ignore_eos"]) == (str(held_out), 384, False)
    assert plan["train"].params["held_out_data"] == plan["extract_held_out"].params["output"]


def test_a_recipe_set_on_the_spec_without_serve_held_out_plans_as_the_api_validates_it(
    tmp_path: Path,
) -> None:
    """`start --no-serve-held-out --set train.norm_output=true --set train.train_lm_head=false` (GPU run
    14): train still validates on the held-out answers, nothing serves them, and the recipe reaches train's
    params; a section the pipeline lacks, or a param its stage lacks, is refused before any GPU time."""
    from real_model import with_flags

    spec = pipeline_spec(
        tmp_path, tmp_path / "mtbench_eval.jsonl", 4000, 10, held_out=tmp_path / "q.jsonl", eval_step=False
    )
    recipe = ["train.norm_output=true", "train.train_lm_head=false"]
    flagged = with_flags(spec, "auto", True, recipe)  # as `start` applies them, before any GPU time
    training, held_out = tmp_path / "carried" / "conversations.jsonl", tmp_path / "carried" / "held_out.jsonl"
    training.parent.mkdir()
    conversations(training, 3)
    body = carried.carried_spec(flagged, training, held_out, answer_tokens=384)
    plan = {step.step: step for step in eagle3_plan(Eagle3PipelineCreate(**body), str(tmp_path / "runs/p"))}
    assert list(plan) == ["extract", "extract_held_out", "train", "fix_keys", "gpu_check", "benchmark"]
    train = plan["train"].params
    assert (train["norm_output"], train["train_lm_head"]) == (True, False)
    parsed = TrainParams.model_validate(train)  # what the worker runs
    assert (parsed.norm_output, parsed.train_lm_head) == (True, False)
    assert train["held_out_data"] == plan["extract_held_out"].params["output"]
    assert train["lr"] == spec["train"]["lr"]  # the rest of the section is kept
    assert spec["held_out"]["serve"] is True  # the flags changed a copy
    with pytest.raises(SystemExit, match="no 'trian' section"):
        with_flags(spec, "auto", False, ["trian.norm_output=true"])
    with pytest.raises(SystemExit, match="train.norm_ouput: train has no such param"):
        with_flags(spec, "auto", False, ["train.norm_ouput=true"])


def test_a_call_that_ends_before_generate_does_saves_what_it_has_as_partial(tmp_path: Path) -> None:
    out = tmp_path / "out"
    saver = carried.GeneratedSaver(out)
    state = pipeline(tmp_path, "running", "pending")
    saver(state)
    assert not out.exists()  # a poll saves nothing while generate runs
    with (tmp_path / "c.jsonl").open("a") as handle:
        handle.write('{"id": "half-writ')  # a killed writer's tail: generate's resume cuts it
    saver.final(state)
    assert sorted(p.name for p in out.iterdir()) == ["conversations.jsonl.partial.gz.part0"]
    found = carried.unpack(out, tmp_path / "work")
    assert found.training.read_bytes() == (tmp_path / "c.jsonl").read_bytes()
    assert (found.training_complete, found.held_out_complete) == (False, False)
    assert not found.held_out.exists()
    # A second call on the same machine keeps the file there (a completion job may be appending to it)
    found.training.write_text("further along\n")
    again = carried.unpack(out, tmp_path / "work")
    assert again.training.read_text() == "further along\n"

    finished = carried.GeneratedSaver(tmp_path / "out2")
    finished.final(pipeline(tmp_path, "succeeded", "running"))
    assert sorted(p.name for p in (tmp_path / "out2").iterdir()) == [
        "conversations.jsonl.gz.part0",
        "held_out.jsonl.partial.gz.part0",
    ]


def carried_work(settings: Settings, name: str) -> tuple[Path, dict[str, object], carried.Carried]:
    """The GPU recipe's spec in a work folder inside the host's allowed root (one for the session: a folder
    per test), and a partial training file carried there with no held-out conversations."""
    work = settings.allowed_roots[0] / name
    (work / "carried").mkdir(parents=True)
    spec = pipeline_spec(
        work,
        work / "mtbench_eval.jsonl",
        16000,
        10,
        held_out=work / "mtbench_held_out.jsonl",
        eval_step=False,
    )
    training = conversations(work / "carried" / "conversations.jsonl", 5)
    found = carried.Carried(training, False, work / "carried" / "held_out.jsonl", False)
    return work, spec, found


def test_completion_jobs_are_the_pipelines_own_generate_steps_resumed_into_the_carried_files(
    settings: Settings,
) -> None:
    work, spec, found = carried_work(settings, "carried-plan")
    jobs = carried.completion_jobs(spec, found, work)
    plan = {s.step: s.params for s in eagle3_plan(Eagle3PipelineCreate(**spec), str(work / "elsewhere"))}
    assert [j["params"]["output"] for j in jobs] == [str(found.training), str(found.held_out)]
    for job, step in zip(jobs, ("generate", "generate_held_out"), strict=True):
        assert job["kind"] == "generate"
        assert {k: v for k, v in job["params"].items() if k != "output"} == {
            k: v for k, v in plan[step].items() if k != "output"
        }  # the same prompts, count, sampling, engine and holdout as the pipeline would have run
    assert plan["generate"]["self_prompts"]["count"] == 16000
    whole = carried.Carried(found.training, True, found.held_out, True)
    assert carried.completion_jobs(spec, whole, work) == []
    body = carried.carried_spec(spec, found.training, found.held_out, answer_tokens=384)
    assert body["held_out"]["conversations"] == str(found.held_out)
    assert "limit" not in body["extract"]  # 5 carried, 16,000 asked: all of them
    spec["generate"]["self_prompts"]["count"] = 3  # a data-size point from a larger carried set
    sliced = carried.carried_spec(spec, found.training, found.held_out, answer_tokens=384)
    assert sliced["extract"] == spec["extract"] | {"limit": 3}
    plan = {s.step: s.params for s in eagle3_plan(Eagle3PipelineCreate(**sliced), str(work / "sliced"))}
    assert plan["extract"]["limit"] == 3  # the API keeps it: extract stops after the first 3 usable samples


def test_completion_posts_each_job_once_and_saves_partial_parts_at_the_deadline(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    """Against the real API (no worker runs here, so the job stays queued: the deadline path)."""
    work, spec, found = carried_work(settings, "carried-deadline")
    register_host(settings, "h200", gpus=1, roots=[str(settings.allowed_roots[0])])
    client.headers.update(admin)
    jobs = carried.completion_jobs(spec, found, work)
    out = work / "out"
    out.mkdir()
    late = time.monotonic() - 1000
    assert carried.complete_carried(client, jobs, out, late, deadline_s=1) is False
    assert job_count(client, admin) == 1  # the held-out job waits for the training one
    assert sorted(p.name for p in out.iterdir()) == ["conversations.jsonl.partial.gz.part0"]
    assert carried.unpack(out, work / "back").training.read_bytes() == found.training.read_bytes()
    # The next call on the same machine follows the queued job rather than post a second writer
    assert carried.complete_carried(client, jobs, out, late, deadline_s=1) is False
    assert job_count(client, admin) == 1
    queued = client.get("/v1/jobs", params={"kind": "generate"}).json()["items"][0]
    assert (queued["params"]["resume"], queued["params"]["output"]) == (True, str(found.training))


def a_draft(folder: Path, size: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * (size // 256) + b"w" * (size % 256))
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8}')
    return folder


def test_a_drafter_leaves_in_parts_and_comes_back_whole_only_when_every_part_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(carried, "DRAFT_PART_BYTES", 1000)  # the device's 16 MiB, scaled down
    draft = a_draft(tmp_path / "sglang_draft", 2500)
    out = tmp_path / "out"
    carried.save_draft(draft, out)
    # 3 parts and the manifest: with the report's 4 files, the 8 a call returns
    assert sorted(p.name for p in out.iterdir()) == [
        "draft_parts.json", "model.safetensors.part0", "model.safetensors.part1", "model.safetensors.part2",
    ]  # fmt: skip
    back = carried.unpack_draft(out, tmp_path / "back")
    assert back is not None
    assert (back / "model.safetensors").read_bytes() == (draft / "model.safetensors").read_bytes()
    assert json.loads((back / "config.json").read_text()) == json.loads((draft / "config.json").read_text())
    assert carried.unpack_draft(tmp_path / "sglang_draft", tmp_path / "none") is None  # no manifest there
    damaged = bytearray((out / "model.safetensors.part1").read_bytes())
    damaged[10] ^= 1
    (out / "model.safetensors.part1").write_bytes(bytes(damaged))
    with pytest.raises(SystemExit, match="model.safetensors.part1"):
        carried.unpack_draft(out, tmp_path / "back2")
    (out / "model.safetensors.part2").unlink()
    with pytest.raises(SystemExit, match="lacks model.safetensors.part2"):
        carried.unpack_draft(out, tmp_path / "back3")
    with pytest.raises(ValueError, match="more than one call returns"):
        carried.save_draft(a_draft(tmp_path / "big", 3001), tmp_path / "too_many")  # 4 parts


def test_a_call_ending_between_fix_keys_and_the_pipelines_end_keeps_the_draft(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(carried, "DRAFT_PART_BYTES", 1000)
    draft = a_draft(tmp_path / "sglang_draft", 1500)

    def at(state: str, fix_keys: str) -> dict[str, object]:
        job = {"pipeline_step": "fix_keys", "state": fix_keys, "result": {"dest": str(draft)}}
        return {"state": state, "jobs": [job]}

    for name, pipeline in (("serving", at("running", "succeeded")), ("failed", at("failed", "succeeded"))):
        carried.keep_draft(pipeline, tmp_path / name)
        assert carried.unpack_draft(tmp_path / name, tmp_path / f"{name}_back") is not None
    for name, pipeline in (("training", at("running", "pending")), ("served", at("succeeded", "succeeded"))):
        carried.keep_draft(pipeline, tmp_path / name)
        assert not (tmp_path / name).exists()  # nothing to serve yet, or nothing left to serve
    draft = a_draft(tmp_path / "big_draft", 3001)  # 4 parts: the call's report comes back without it
    carried.keep_draft(at("running", "succeeded"), tmp_path / "big")
    assert not list((tmp_path / "big").glob("model.safetensors.part*"))


def test_a_carried_draft_is_served_by_the_pipelines_own_serving_steps(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    """serve_jobs against the API's own plan, then posted to the real API (no worker runs here, so the
    first job stays queued: the deadline path, and the second is not posted beside it)."""
    work, spec, found = carried_work(settings, "carried-serve")
    found.held_out.write_text(found.training.read_text())
    body = carried.carried_spec(spec, found.training, found.held_out, answer_tokens=384)
    draft = work / "carried_draft"
    jobs = carried.serve_jobs(body, draft, work)
    plan = {s.step: s.params for s in eagle3_plan(Eagle3PipelineCreate(**body), str(work / "elsewhere"))}
    assert list(jobs) == ["serve_held_out", "benchmark"]
    for step, job in jobs.items():
        assert job["kind"] == "benchmark"
        assert job["params"]["launch"]["draft"] == str(draft)
        assert plan[step]["launch"]["draft"] != str(draft)  # the plan itself is left as it was
        assert {k: v for k, v in job["params"].items() if k != "launch"} == {
            k: v for k, v in plan[step].items() if k != "launch"
        }
    assert jobs["serve_held_out"]["params"]["prompts"] == str(found.held_out)
    assert jobs["serve_held_out"]["params"]["max_new_tokens"] == 384
    register_host(settings, "h200", gpus=1, roots=[str(settings.allowed_roots[0])])
    client.headers.update(admin)
    out = work / "out"
    assert carried.serve_carried(client, jobs, out, time.monotonic() - 1000, deadline_s=1) == []
    assert job_count(client, admin) == 1
    queued = client.get("/v1/jobs", params={"kind": "benchmark"}).json()["items"][0]
    assert queued["params"]["launch"]["draft"] == str(draft)
    assert queued["params"]["prompts"] == str(found.held_out)
    assert json.loads((out / "served.json").read_text()) == []
