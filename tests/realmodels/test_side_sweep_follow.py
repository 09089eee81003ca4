"""`real_model.py spec-sweep` on the GPU host: it starts the reference trainer's draft sweep only once the
trainer's process has exited (the sweep job's GPU gate fails a job that starts beside another process on the
GPU), and a second call follows the sweep job the first one posted instead of posting another behind it (a
three-chain sweep outlasts one device call). Real processes and the real API against PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

from journey_api import process_ended, run_sweep_job
from side_by_side_phases import _trainer_done, paired_benchmarks

from tests.app.test_benchmark_compare import record, sweep
from tests.app.test_jobs_api import job_count, register_host, submit


def test_a_running_process_has_not_ended_and_a_reaped_or_zombie_one_has() -> None:
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not process_ended(running.pid)
    finally:
        running.kill()
    deadline = time.monotonic() + 10
    while not process_ended(running.pid):  # killed, not yet reaped: a zombie, which holds no GPU memory
        assert time.monotonic() < deadline, "a killed child never read as ended"
        time.sleep(0.05)
    running.wait()
    assert process_ended(running.pid)


def test_the_sweep_waits_for_the_trainers_process_to_exit(tmp_path: Path) -> None:
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    (tmp_path / "spec.pid").write_text(str(trainer.pid))
    began = time.monotonic()
    assert _trainer_done(tmp_path, "spec", lambda: time.monotonic() - began > 20, grace_s=0)
    assert trainer.poll() is not None or process_ended(trainer.pid)
    assert time.monotonic() - began >= 1.0
    trainer.wait()


def test_a_trainer_still_running_at_the_deadline_is_reported_not_swept(tmp_path: Path) -> None:
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "spec.pid").write_text(str(trainer.pid))
        assert not _trainer_done(tmp_path, "spec", lambda: True, grace_s=0)
        assert trainer.poll() is None
    finally:
        trainer.kill()
        trainer.wait()


def test_a_second_call_follows_the_posted_sweep_job(
    client: TestClient, admin: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    register_host(settings)
    client.headers.update(admin)
    earlier = submit(client, admin, params={"lines": 1})
    assert client.post(f"/v1/jobs/{earlier['id']}/cancel").status_code == 202
    id_file = tmp_path / "sweep_job_id"
    id_file.write_text(str(earlier["id"]))
    before = job_count(client, admin)
    followed = run_sweep_job(client, {"host": "gpu-a", "params": {}}, time.monotonic(), 30, id_file)
    assert followed["id"] == earlier["id"]
    assert followed["state"] == "cancelled"
    assert job_count(client, admin) == before  # nothing posted


def test_a_refused_sweep_leaves_no_id_to_follow(
    client: TestClient, admin: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    register_host(settings)
    client.headers.update(admin)
    id_file = tmp_path / "sweep_job_id"
    with pytest.raises(SystemExit, match="INVALID_PARAMS"):
        run_sweep_job(client, {"host": "gpu-a", "params": {"mode": "sweep"}}, time.monotonic(), 30, id_file)
    assert not id_file.exists()


def test_draft_parts_brings_back_the_reference_trainers_draft_whole(tmp_path: Path) -> None:
    """`real_model.py draft-parts WORK OUT --draft-of speculators`: its fix-keyed draft in parts, whole again
    by `carried.unpack_draft` (run 15 served speculators' draft and brought none of it back to compare)."""
    import argparse
    import os

    import carried
    from real_model import draft_parts

    draft = tmp_path / "work" / "spec" / "sglang_draft"
    draft.mkdir(parents=True)
    weights = os.urandom(carried.DRAFT_PART_BYTES + 1000)  # two parts
    (draft / carried.DRAFT_WEIGHTS).write_bytes(weights)
    (draft / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    out = tmp_path / "out"
    draft_parts(argparse.Namespace(work=tmp_path / "work", out=out, draft_of="speculators"))
    whole = carried.unpack_draft(out, tmp_path / "whole")
    assert whole is not None
    assert (whole / carried.DRAFT_WEIGHTS).read_bytes() == weights
    assert len(list(out.glob(f"{carried.DRAFT_WEIGHTS}.part*"))) == 2


def _sweep_spec(tmp_path: Path) -> dict[str, object]:
    """speculators_side_by_side.sweep_job's spec for a draft, as the GPU journey writes it."""
    from speculators_side_by_side import sweep_job

    (tmp_path / "mtbench_eval.jsonl").write_text('{"turns": ["hi"]}\n')
    return sweep_job(tmp_path, tmp_path / "spec" / "sglang_draft", "3,1,4 5,1,6 7,1,8")


@pytest.mark.parametrize("carried", [True, False])
def test_a_draft_swept_on_held_out_is_asked_as_serve_held_out_asks(tmp_path: Path, carried: bool) -> None:
    from side_by_side_phases import on_held_out

    from app.pipelines.templates import ALL_PROMPTS, HELD_OUT_CONCURRENCY
    from contract.params.benchmark import BenchmarkParams

    held_file = str(tmp_path / "held_out.jsonl")
    held = {"prompts": None, "conversations": held_file, "serve": False, "max_new_tokens": 384}
    jobs = [{"pipeline_step": "train", "result": {}}]
    if (
        not carried
    ):  # generate_held_out answered the held-out questions: its output is what train validated on
        held = {
            "prompts": str(tmp_path / "q.jsonl"),
            "conversations": None,
            "serve": True,
            "max_new_tokens": None,
        }
        jobs.append({"pipeline_step": "generate_held_out", "result": {"conversations": held_file}})
    spec = _sweep_spec(tmp_path)
    swept = on_held_out(spec, {"spec": {"held_out": held}, "jobs": jobs})
    params = swept["params"]
    assert params["prompts"] == held_file
    assert (params["max_prompts"], params["concurrency"]) == (ALL_PROMPTS, HELD_OUT_CONCURRENCY)
    assert params["ignore_eos"] is False
    assert params["max_new_tokens"] == 384
    assert params["speedup_threshold"] == 0.0
    assert params["configs"] == spec["params"]["configs"]  # type: ignore[index]
    assert params["launch"]["draft"] == str(tmp_path / "spec" / "sglang_draft")
    assert swept["host"] == "h200"
    BenchmarkParams.model_validate(params)  # what the API takes


def test_a_pipeline_without_held_out_answers_is_refused_with_what_is_missing(tmp_path: Path) -> None:
    from side_by_side_phases import on_held_out

    with pytest.raises(SystemExit, match="--held-out 72"):
        on_held_out(_sweep_spec(tmp_path), {"spec": {"held_out": None}, "jobs": []})
    asked = {"prompts": str(tmp_path / "q.jsonl"), "conversations": None, "max_new_tokens": None}
    unanswered = {
        "spec": {"held_out": asked},
        "jobs": [{"pipeline_step": "generate_held_out", "result": None}],
    }
    with pytest.raises(SystemExit, match="generate_held_out has not succeeded"):
        on_held_out(_sweep_spec(tmp_path), unanswered)


@pytest.mark.parametrize("held_out", [False, True])
def test_pair_compares_the_pipelines_drafter_with_the_reference_draft_on_the_same_requests(
    client: TestClient, admin: dict[str, str], settings: Settings, tmp_path: Path, held_out: bool
) -> None:
    """`real_model.py pair`: the pipeline's benchmark job (or serve_held_out) against the job `spec-sweep`
    posted, through GET /v1/benchmarks/compare; a reference job that recorded no table says so."""
    client.headers.update(admin)
    ours = record(client, admin, settings, sweep({"5,1,6": [(90, 30)] * 30}))
    theirs = record(client, admin, settings, sweep({"5,1,6": [(60, 30)] * 30}))
    job_of = {b["id"]: b["job_id"] for b in client.get("/v1/benchmarks").json()["items"]}
    step = "serve_held_out" if held_out else "benchmark"
    pipeline = {"jobs": [{"pipeline_step": "train", "id": "x"}, {"pipeline_step": step, "id": job_of[ours]}]}
    folder = tmp_path / "spec"
    folder.mkdir()
    (folder / f"sweep_job_id{'_held_out' if held_out else ''}").write_text(job_of[theirs])
    comparison = paired_benchmarks(client, pipeline, tmp_path, "speculators", held_out=held_out)
    assert (comparison["a"]["id"], comparison["b"]["id"]) == (ours, theirs)
    assert comparison["configs"][0]["verdict"].startswith("a accepts more")
    unfinished = submit(client, admin)
    (folder / f"sweep_job_id{'_held_out' if held_out else ''}").write_text(str(unfinished["id"]))
    with pytest.raises(SystemExit, match="recorded no benchmark table"):
        paired_benchmarks(client, pipeline, tmp_path, "speculators", held_out=held_out)
    with pytest.raises(SystemExit, match="nothing to pair"):
        paired_benchmarks(client, pipeline, tmp_path, "speculators", held_out=not held_out)
