"""Data parallel: the extract and train stages as torchrun ranks (gloo on CPU: the same code path as NCCL on
GPUs, which this machine does not have), directly and as a job through a real worker."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from fastapi.testclient import TestClient

from app.core.config import Settings
from contract.params.extract import ExtractParams
from contract.params.train import TrainParams
from drafting.context import RecordingSink, StageContext, StageError
from drafting.ml.hidden_store import hidden_path, load_sample, read_manifest
from drafting.ml.train_state import STATE_FILE, load_state
from drafting.stages import extract, train
from tests.conftest import WorkerProcess
from testsupport.tiny_targets import (
    TINY_CONFIG,
    chat,
    cpu_train_params,
    successor_extraction,
    successor_target,
    write_jsonl,
)

Headers = dict[str, str]


def _extraction(root: Path, conversations: int, words: int) -> tuple[Path, Path]:
    return successor_extraction(root, conversations=conversations, turns=1, words=words, seed=3, max_len=64)


def _params(target: Path, data: Path, output: Path, **overrides: Any) -> TrainParams:
    values = {
        "ttt_steps": 2, "lr": 1e-2, "warmup_steps": 0, "schedule": "constant", "val_fraction": 0.0,
        "draft_vocab_size": TINY_CONFIG["vocab_size"], **overrides,
    }  # fmt: skip
    return cpu_train_params(target, data, output, **values)


def _losses(sink: RecordingSink) -> dict[int, float]:
    return {e["step"]: e["value"] for e in sink.of_type("metric") if e["name"] == "train/loss"}


def test_two_ranks_extract_what_one_process_extracts_and_resume_with_any_count(tmp_path: Path) -> None:
    target = successor_target(tmp_path / "target")
    rng = random.Random(5)
    chats = [chat(rng, turns=rng.randint(1, 3), words=rng.randint(3, 12)) for _ in range(9)]
    data = write_jsonl(tmp_path / "data.jsonl", chats)

    def params(output: str, **more: Any) -> ExtractParams:
        return ExtractParams(
            target=str(target), data=str(data), output=str(tmp_path / output), device="cpu",
            dtype="float32", batch_size=2, max_len=64, **more,
        )  # fmt: skip

    single = extract.run(StageContext(work_dir=tmp_path), params("single"))
    sink = RecordingSink()
    pair = extract.run(StageContext(work_dir=tmp_path / "work", sink=sink), params("pair", ranks=2))

    assert pair["written_this_run"] == 9
    assert {k: pair[k] for k in ("samples", "tokens", "bytes")} == {
        k: single[k] for k in ("samples", "tokens", "bytes")
    }
    for index in range(9):
        one, two = load_sample(tmp_path / "single", index), load_sample(tmp_path / "pair", index)
        assert torch.equal(one["token_ids"], two["token_ids"])
        # other batch-mates, other padding: the same states up to float32 rounding
        torch.testing.assert_close(two["hidden_states"], one["hidden_states"], rtol=1e-4, atol=1e-5)
    manifest = read_manifest(tmp_path / "pair")
    assert manifest is not None
    assert manifest["status"] == "complete"
    assert [e["kind"] for e in sink.of_type("artifact")] == ["hidden_states"]  # rank 0 alone reports
    assert sink.of_type("progress")[-1]["fraction"] == 1.0

    for index in (1, 4, 7):  # a crash lost three files: any number of ranks redoes exactly those
        hidden_path(tmp_path / "pair", index).unlink()
    again = extract.run(StageContext(work_dir=tmp_path / "work"), params("pair", ranks=2))
    assert again["written_this_run"] == 3
    once_more = extract.run(StageContext(work_dir=tmp_path / "work"), params("pair"))
    assert once_more["written_this_run"] == 0


def test_two_ranks_train_exactly_like_one_process_on_the_global_batch(tmp_path: Path) -> None:
    """Two conversations of the same shape (word-level tokenizer, full draft vocab): each rank's mean loss
    has the same token count, so averaging the ranks' gradients must equal one process on both samples.
    A run whose ranks did not all-reduce gradients would drift apart from the first step."""
    target, data = _extraction(tmp_path, conversations=2, words=10)
    single_sink, ranks_sink = RecordingSink(), RecordingSink()
    single = _params(target, data, tmp_path / "single", batch_size=2, epochs=4)
    pair = _params(target, data, tmp_path / "pair", batch_size=1, epochs=4, ranks=2)
    train.run(StageContext(work_dir=tmp_path, sink=single_sink), single)
    result = train.run(StageContext(work_dir=tmp_path / "work", sink=ranks_sink), pair)

    assert result["global_step"] == 4
    assert result["epochs_done"] == 4
    assert result["checkpoint"] == str(tmp_path / "pair" / "epoch_4")
    one, two = _losses(single_sink), _losses(ranks_sink)
    assert sorted(two) == [1, 2, 3, 4]
    assert two == pytest.approx(one, rel=1e-5)
    assert two[4] < two[1]  # it learns: the same rule as the single-process tests
    weights_one = load_state(tmp_path / "single")["drafter"]  # type: ignore[index]
    weights_two = load_state(tmp_path / "pair")["drafter"]  # type: ignore[index]
    for name, tensor in weights_one.items():
        torch.testing.assert_close(weights_two[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    # rank 0 alone reported and saved: one artifact per epoch, one epoch folder each
    drafters = [e for e in ranks_sink.of_type("artifact") if e["kind"] == "drafter"]
    assert [e["meta"]["epoch"] for e in drafters] == [1, 2, 3, 4]
    assert [e["kind"] for e in ranks_sink.of_type("artifact")][-1] == "best_drafter"
    assert sorted(p.name for p in (tmp_path / "pair").glob("epoch_*")) == [f"epoch_{n}" for n in range(1, 5)]


def test_a_rank_failure_is_reported_with_its_reason(tmp_path: Path) -> None:
    target, data = _extraction(tmp_path, conversations=4, words=6)
    other = successor_target(tmp_path / "other-target")
    (other / "config.json").write_text(
        (other / "config.json").read_text().replace('"hidden_size": 64', '"hidden_size": 32')
    )
    with pytest.raises(StageError) as failed:
        train.run(StageContext(work_dir=tmp_path), _params(other, data, tmp_path / "out", ranks=2))
    assert failed.value.reason == "DATA_MISMATCH"
    assert "hidden_size" in failed.value.message
    assert target.exists()


def test_resume_refuses_another_number_of_ranks(tmp_path: Path) -> None:
    target, data = _extraction(tmp_path, conversations=4, words=6)
    train.run(StageContext(work_dir=tmp_path), _params(target, data, tmp_path / "out", max_steps=1))
    with pytest.raises(StageError) as refused:
        train.run(
            StageContext(work_dir=tmp_path), _params(target, data, tmp_path / "out", max_steps=1, ranks=2)
        )
    assert refused.value.details["changed"] == ["ranks"]


def test_submit_refuses_ranks_that_contradict_the_gpus(client: TestClient, admin: Headers) -> None:
    before = client.get("/v1/jobs", params={"kind": "train"}, headers=admin).json()["items"]
    params = {"target": "/tmp/t", "data": "/tmp/d", "output": "/tmp/o", "ranks": 2}
    response = client.post("/v1/jobs", json={"kind": "train", "params": params, "gpus": 4}, headers=admin)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "INVALID_PARAMS"
    assert "ranks is 2 but the job asks for 4 GPU(s)" in response.json()["detail"]
    assert client.get("/v1/jobs", params={"kind": "train"}, headers=admin).json()["items"] == before


def _rank_processes(work_dir_marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(work_dir_marker in part for part in cmdline) and any("event-fifo" in p for p in cmdline):
            found.append(proc)
    return found


def _wait_for_metric(client: TestClient, headers: Headers, job_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = client.get(f"/v1/jobs/{job_id}/metrics", params={"name": "train/loss"}, headers=headers)
        if metrics.status_code == 200 and metrics.json():
            return
        time.sleep(0.5)
    raise AssertionError(
        client.get(f"/v1/jobs/{job_id}/logs", params={"format": "text"}, headers=headers).text
    )


def test_ranks_as_a_job_report_live_cancel_cleanly_and_resume(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    root = settings.allowed_roots[0] / f"ranks-{time.monotonic_ns()}"
    root.mkdir()
    target, data = _extraction(root, conversations=24, words=8)
    start_worker("cpu-box", EYAS_CANCEL_GRACE_S="30")  # the tests' 2 s is shorter than a state save here
    params = _params(target, data, root / "run", batch_size=2, epochs=200, ranks=2).model_dump(mode="json")
    job = client.post(
        "/v1/jobs", json={"kind": "train", "params": params, "host": "cpu-box"}, headers=admin
    ).json()
    _wait_for_metric(client, admin, job["id"])
    running = client.get(f"/v1/jobs/{job['id']}", headers=admin).json()
    assert running["state"] == "running"
    assert 0 < running["progress"] < 1
    assert _rank_processes(job["id"]), "no rank processes while the job runs"

    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin).status_code == 202
    ended = client.get(f"/v1/jobs/{job['id']}/wait", params={"timeout": 60}, headers=admin).json()
    assert ended["state"] == "cancelled", ended
    log = client.get(f"/v1/jobs/{job['id']}/logs", params={"format": "text"}, headers=admin).text
    assert "starting 2 ranks with torchrun" in log
    assert "Traceback" not in log, log  # the ranks stopped between steps, not killed mid-way
    assert not _rank_processes(job["id"]), "rank processes outlived the cancel"
    saved = load_state(root / "run")
    assert saved is not None
    assert saved["position"]["global_step"] >= 1, "the cancel lost the steps done"
    assert (root / "run" / STATE_FILE).exists()

    resumed = {**params, "epochs": 200, "max_steps": saved["position"]["global_step"] + 2}
    again = client.post(
        "/v1/jobs", json={"kind": "train", "params": resumed, "host": "cpu-box"}, headers=admin
    ).json()
    done = client.get(f"/v1/jobs/{again['id']}/wait", params={"timeout": 120}, headers=admin).json()
    assert done["state"] == "succeeded", done
    assert done["result"]["global_step"] == saved["position"]["global_step"] + 2
    log = client.get(f"/v1/jobs/{again['id']}/logs", params={"format": "text"}, headers=admin).text
    assert (
        f"resuming at epoch {saved['position']['epoch'] + 1}, step {saved['position']['global_step']}" in log
    )
