"""Targets whose text model only their own code can build (testsupport/target_zoo.py `remote_code`), and
targets that name code they do not need (the Kimi-K2.5-shaped wrapper).

eyas never lets transformers ask on the terminal: it builds a text model transformers ships with
transformers' class whatever the config's auto_map says, and runs a folder's code only when the job sets
trust_remote_code and the host's settings allow it (EYAS_ALLOW_REMOTE_CODE); otherwise the job fails
REMOTE_CODE_NOT_ALLOWED with what to do, before anything is written.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from app.core.config import Settings
from contract.params.extract import ExtractParams
from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.ml.target_head import load_target_head
from drafting.ml.text_model import RemoteCodeRefused, load_text_model, text_model_spec
from drafting.stages import extract, launch, train
from drafting.stages._torchrun import torchrun_argv
from tests.conftest import WorkerProcess
from tests.ml.stage_process import run_stage_process
from testsupport.target_zoo import kimi_k25, remote_code
from testsupport.tiny_targets import chat, cpu_train_params, write_jsonl


def conversations(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    return write_jsonl(path, [chat(rng, turns=2, words=5) for _ in range(3)])


def extract_params(target: Path, root: Path, **values: Any) -> ExtractParams:
    data = conversations(root / "data.jsonl")
    return ExtractParams(
        target=str(target), data=str(data), output=str(root / "hs"), device="cpu", dtype="float32",
        max_len=48, **values,
    )  # fmt: skip


def test_a_target_that_needs_its_own_code_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    target = remote_code(tmp_path / "target")
    with pytest.raises(StageError) as refused:
        extract.run(StageContext(work_dir=tmp_path), extract_params(target, tmp_path))
    assert refused.value.reason == TerminationReason.REMOTE_CODE_NOT_ALLOWED
    assert "eyas_tiny_remote" in refused.value.message
    assert "modeling_eyas_tiny.EyasTinyForCausalLM" in refused.value.message
    assert "trust_remote_code: true" in refused.value.message
    assert not (tmp_path / "hs").exists()
    with pytest.raises(RemoteCodeRefused):
        load_target_head(target)


def test_trust_remote_code_needs_the_hosts_permission(tmp_path: Path) -> None:
    target = remote_code(tmp_path / "target")
    with pytest.raises(StageError) as refused:
        extract.run(StageContext(work_dir=tmp_path), extract_params(target, tmp_path, trust_remote_code=True))
    assert refused.value.reason == TerminationReason.REMOTE_CODE_NOT_ALLOWED
    assert "EYAS_ALLOW_REMOTE_CODE" in refused.value.message
    assert not (tmp_path / "hs").exists()
    spec = LaunchParams(engine="reference", model=str(target), trust_remote_code=True, dry_run=True)
    with pytest.raises(StageError) as launch_refused:
        launch.run(StageContext(work_dir=tmp_path), spec)
    assert launch_refused.value.reason == TerminationReason.REMOTE_CODE_NOT_ALLOWED
    allowed = launch.run(StageContext(work_dir=tmp_path, allow_remote_code=True), spec)
    assert "--trust-remote-code" in allowed["argv"]


def test_trust_remote_code_is_a_field_not_an_extra_arg() -> None:
    with pytest.raises(ValueError, match="set the `trust_remote_code` field instead"):
        LaunchParams(engine="sglang", model="/m", extra_args=["--trust-remote-code"])


def test_a_trusted_target_runs_its_own_code_where_the_host_allows_it(tmp_path: Path) -> None:
    """Through the stage process as the worker starts it (--allow-remote-code from the host's settings):
    extract runs the folder's class; train without trust is refused, with it (allowed) it trains."""
    target = remote_code(tmp_path / "target")
    params = extract_params(target, tmp_path, trust_remote_code=True)
    refused = run_stage_process("extract", params, tmp_path)
    assert refused.of_type("error")[0]["reason"] == TerminationReason.REMOTE_CODE_NOT_ALLOWED
    assert "Traceback" not in refused.log
    ran = run_stage_process("extract", params, tmp_path, args=["--allow-remote-code"])
    assert ran.of_type("result"), ran.log
    model = load_text_model(target, dtype=torch.float32, trust_remote_code=True)
    assert type(model).__name__ == "EyasTinyForCausalLM"
    assert type(model).__module__.startswith("transformers_modules")  # the folder's own module
    train_params = cpu_train_params(
        target, tmp_path / "hs", tmp_path / "train", epochs=1, batch_size=1, ttt_steps=2, draft_vocab_size=32,
        val_fraction=0.0, max_len=48,
    )  # fmt: skip
    with pytest.raises(StageError) as untrusted:
        train.run(StageContext(work_dir=tmp_path), train_params)
    assert untrusted.value.reason == TerminationReason.REMOTE_CODE_NOT_ALLOWED
    trusted = train_params.model_copy(update={"trust_remote_code": True})
    assert train.run(StageContext(work_dir=tmp_path, allow_remote_code=True), trusted)["checkpoint"]


def test_the_kimi_wrapper_loads_with_transformers_class_without_its_missing_code(tmp_path: Path) -> None:
    """Its config's auto_map names files the folder does not hold; its text model is DeepSeek-V3, which
    transformers ships: no code runs and nothing asks (the stage process too, as the worker runs it)."""
    target = kimi_k25(tmp_path / "kimi")
    assert not list(target.glob("*.py"))
    assert text_model_spec(target).class_name == "DeepseekV3ForCausalLM"
    before = {name for name in sys.modules if name.startswith("transformers_modules")}
    load_text_model(target, dtype=torch.float32)
    load_target_head(target)
    assert {name for name in sys.modules if name.startswith("transformers_modules")} == before
    run = run_stage_process("extract", extract_params(target, tmp_path), tmp_path)
    assert run.of_type("result"), run.log
    assert "custom code" not in run.log


def _wait_job(
    client: TestClient, headers: dict[str, str], job_id: str, timeout_s: float = 240
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(
            f"/v1/jobs/{job_id}/wait", params={"timeout": 5}, headers=headers
        ).json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
    raise AssertionError(f"job {job_id} still {job['state']}")


@pytest.mark.timeout(600)
def test_the_hosts_setting_reaches_the_job_through_a_real_worker(
    client: TestClient, admin: dict[str, str], settings: Settings, start_worker: Any
) -> None:
    root = settings.allowed_roots[0] / f"remote-{time.monotonic_ns()}"
    target = remote_code(root / "target")
    workers: dict[str, WorkerProcess] = {
        "closed": start_worker("closed-box"),
        "open": start_worker("open-box", EYAS_ALLOW_REMOTE_CODE="true"),
    }
    outcomes = {}
    for name, worker in workers.items():
        params = extract_params(target, root / name, trust_remote_code=True).model_dump()
        body = {"kind": "extract", "host": worker.host, "params": params}
        created = client.post("/v1/jobs", json=body, headers=admin)
        assert created.status_code == 201, created.text
        outcomes[name] = _wait_job(client, admin, created.json()["id"])
    assert outcomes["closed"]["state"] == "failed"
    assert outcomes["closed"]["termination_reason"] == "REMOTE_CODE_NOT_ALLOWED"
    assert "EYAS_ALLOW_REMOTE_CODE" in outcomes["closed"]["message"]
    assert outcomes["open"]["state"] == "succeeded", outcomes["open"]


def test_torchrun_ranks_inherit_the_hosts_permission(tmp_path: Path) -> None:
    """A stage that runs itself as torchrun ranks (extract, train on several GPUs) passes it on to them."""
    argv = torchrun_argv(
        StageContext(work_dir=tmp_path, allow_remote_code=True), "extract", tmp_path, tmp_path, 2
    )
    assert "--allow-remote-code" in argv
    assert "--allow-remote-code" not in torchrun_argv(
        StageContext(work_dir=tmp_path), "extract", tmp_path, tmp_path, 2
    )
