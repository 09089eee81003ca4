"""POST/GET /v1/launch/render: a dry-run launch on the host through a real worker; nothing starts."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from cli.demo.constructed import successor_target
from drafting.serving.launch.sglang_parser import installed_sglang_version
from tests.conftest import WorkerProcess, free_port
from tests.zoo_drafts import zoo_draft
from testsupport import target_zoo as zoo

Headers = dict[str, str]


def test_render_shows_argv_and_every_finding_without_starting_anything(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    root = settings.allowed_roots[0] / "render"
    target = successor_target(root / "target")
    spec = {
        "engine": "sglang",
        "model": str(target),
        "draft": str(root / "missing-draft"),
        "depth": 3,
        "extra_args": ["--num-speculative-tokens", "16", "--num-continuous-decode-steps", "4"],
    }
    response = client.post(
        "/v1/launch/render", json={"spec": spec, "host": "gpu-a", "timeout": 90}, headers=admin
    )
    assert response.status_code == 200, response.text
    rendered = response.json()
    assert rendered["ok"] is False
    codes = {f["code"] for f in rendered["findings"]}
    assert {"UNKNOWN_FLAG", "IGNORED_FLAG"} <= codes, codes  # SGLang's own parser, then eyas's rules
    assert any(f["code"] == "PATH_MISSING" or "draft" in f["message"] for f in rendered["findings"])
    job = client.get(f"/v1/jobs/{rendered['job_id']}", headers=admin).json()
    assert job["params"]["dry_run"] is True
    assert job["gpus_requested"] == 0
    assert client.get("/v1/servers", headers=admin).json()["items"] == []  # nothing was started


def test_render_of_a_good_reference_spec_via_get(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    target = successor_target(settings.allowed_roots[0] / "render-get" / "target")
    spec = json.dumps({"engine": "reference", "model": str(target), "port": 31555})
    response = client.get(
        "/v1/launch/render", params={"spec": spec, "host": "gpu-a", "timeout": 90}, headers=admin
    )
    rendered = response.json()
    assert rendered["ok"] is True, rendered
    assert "drafting.serving.engine.reference_engine" in " ".join(rendered["argv"])
    assert "--port" in rendered["argv"]


def test_render_refuses_bad_specs_before_any_job(client: TestClient, admin: Headers, reader: Headers) -> None:
    bad = client.post("/v1/launch/render", json={"spec": {"model": "relative/path"}}, headers=admin)
    assert bad.status_code == 422
    assert client.get("/v1/launch/render", params={"spec": "{not json"}, headers=admin).status_code == 422
    assert client.post("/v1/launch/render", json={"spec": {}}, headers=reader).status_code == 403
    assert client.get("/v1/jobs", headers=admin).json()["items"] == []


NVML_STANDIN = Path(__file__).resolve().parent / "nvml_standin"


def gpu_worker(start_worker: Callable[..., WorkerProcess], tmp_path: Path, gpus: int) -> WorkerProcess:
    """A real worker whose NVML (a stand-in, this machine has no GPU) reports `gpus` idle H200s."""
    standin = tmp_path / "nvml"
    standin.mkdir()
    shutil.copy(NVML_STANDIN / "pynvml.py", standin / "pynvml.py")
    (standin / "gpus").write_text(str(gpus))
    path = os.pathsep.join(p for p in (str(standin), os.environ.get("PYTHONPATH", "")) if p)
    return start_worker("gpu-a", PYTHONPATH=path)


def render(client: TestClient, admin: Headers, spec: dict[str, object]) -> dict[str, Any]:
    response = client.post(
        "/v1/launch/render", json={"spec": spec, "host": "gpu-a", "timeout": 90}, headers=admin
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def finding_codes(rendered: dict[str, object]) -> set[str]:
    findings = rendered["findings"]
    assert isinstance(findings, list)
    return {f["code"] for f in findings}


def test_a_dry_run_is_judged_against_the_hosts_gpus_not_the_none_it_holds(
    client: TestClient,
    admin: Headers,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    gpu_worker(start_worker, tmp_path, gpus=1)
    assert client.get("/v1/hosts/gpu-a", headers=admin).json()["gpu_count"] == 1
    target = successor_target(settings.allowed_roots[0] / "render-gpu" / "target")
    spec: dict[str, object] = {"engine": "sglang", "model": str(target), "port": free_port()}
    rendered = render(client, admin, spec)
    assert rendered["ok"] is True, rendered
    assert "TP_EXCEEDS_GPUS" not in finding_codes(rendered)
    assert client.get(f"/v1/jobs/{rendered['job_id']}", headers=admin).json()["gpus_requested"] == 0

    auto = render(client, admin, {**spec, "engine": "auto"})
    assert auto["engine"] == "sglang", auto  # a GPU host with sglang: what a real launch would start

    too_wide = render(client, admin, {**spec, "tp_size": 2})
    assert too_wide["ok"] is False
    exceeded = [f for f in too_wide["findings"] if f["code"] == "TP_EXCEEDS_GPUS"]
    assert exceeded, too_wide
    assert "this host has 1" in exceeded[0]["message"]


def test_tp_size_that_does_not_split_the_heads_is_refused_with_the_valid_sizes(
    client: TestClient,
    admin: Headers,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    gpu_worker(start_worker, tmp_path, gpus=3)
    target = successor_target(settings.allowed_roots[0] / "render-tp" / "target", heads=4, kv_heads=2)
    spec: dict[str, object] = {"engine": "sglang", "model": str(target), "tp_size": 3, "port": free_port()}
    rendered = render(client, admin, spec)
    assert rendered["ok"] is False
    assert finding_codes(rendered) & {"TP_EXCEEDS_GPUS", "TP_SIZE_HEADS_MISMATCH"} == {
        "TP_SIZE_HEADS_MISMATCH"
    }
    mismatch = next(f for f in rendered["findings"] if f["code"] == "TP_SIZE_HEADS_MISMATCH")
    assert "4 attention heads and 2 KV heads" in mismatch["message"]
    assert mismatch["fix"] == "use tp_size 1, 2 or 4"
    assert render(client, admin, {**spec, "tp_size": 2})["ok"] is True


@pytest.mark.parametrize("flag", ["--help", "-h", "--version", "--hel"])
def test_flags_that_print_and_exit_are_refused_at_submit_and_render(
    client: TestClient, admin: Headers, flag: str
) -> None:
    spec = {
        "engine": "sglang",
        "model": "/models/target",
        "extra_args": ["--decode-log-interval", "10", flag],
    }
    submitted = client.post("/v1/jobs", json={"kind": "launch", "params": spec}, headers=admin)
    assert submitted.status_code == 422, submitted.text
    problem = submitted.json()
    assert flag in problem["detail"]
    assert "exits" in problem["detail"]
    assert problem["errors"][0]["field"] == "params.extra_args"
    rendered = client.post("/v1/launch/render", json={"spec": spec}, headers=admin)
    assert rendered.status_code == 422
    assert client.get("/v1/jobs?include_dry_runs=true", headers=admin).json()["items"] == []


def test_dry_runs_are_hidden_from_the_jobs_list_unless_asked_for(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    target = successor_target(settings.allowed_roots[0] / "render-list" / "target")
    spec = {"engine": "reference", "model": str(target), "port": free_port()}
    rendered = render(client, admin, spec)
    real = client.post("/v1/jobs", json={"kind": "selftest", "params": {}, "host": "gpu-a"}, headers=admin)
    assert real.status_code == 201, real.text

    def listed(query: str = "") -> list[str]:
        return [j["id"] for j in client.get(f"/v1/jobs{query}", headers=admin).json()["items"]]

    assert listed() == [real.json()["id"]]
    assert listed("?kind=launch") == []
    assert listed("?include_dry_runs=true") == [real.json()["id"], rendered["job_id"]]
    assert listed("?kind=launch&include_dry_runs=true") == [rendered["job_id"]]
    assert client.get(f"/v1/jobs/{rendered['job_id']}", headers=admin).status_code == 200


def test_render_refuses_a_target_class_sglang_cannot_serve_with_eagle3(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    root = settings.allowed_roots[0] / "render-mixtral"
    target = zoo.build("mixtral", root / "target")
    draft = zoo_draft(target, root / "draft", release="0.5.14")
    spec = {"engine": "sglang", "model": str(target), "draft": str(draft), "depth": 3, "port": free_port()}
    rendered = render(client, admin, spec)
    assert rendered["ok"] is False
    (refused,) = [f for f in rendered["findings"] if f["code"] == "TARGET_EAGLE3_UNSUPPORTED"]
    assert refused["severity"] == "error"
    # the worker's own SGLang release answers (installed for its python), naming the missing hook
    assert (
        f"SGLang {installed_sglang_version()} cannot serve EAGLE-3 for MixtralForCausalLM"
        in refused["message"]
    )
    assert "set_eagle3_layers_to_capture" in refused["message"]
    assert client.get("/v1/servers", headers=admin).json()["items"] == []
