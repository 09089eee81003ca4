"""The launch checks and `eyas launch --dry-run` say, before anything starts, that SGLang cannot serve
EAGLE-3 for the target's class (the zoo's Mixtral and Llava-style targets), and pass the classes it serves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract.params.launch import LaunchParams
from drafting.findings import Finding, Severity
from drafting.serving.launch.checks import prepare_launch
from drafting.serving.launch.render import HostFacts
from drafting.serving.launch.sglang_parser import installed_sglang_version
from tests.conftest import ROOT, free_port
from tests.zoo_drafts import zoo_draft
from testsupport import target_zoo as zoo

GPU_HOST = HostFacts(python="/usr/bin/python3", sglang_version="0.5.14", gpu_count=1, on_host=True)
CODE = "TARGET_EAGLE3_UNSUPPORTED"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("launch-zoo")


def pair(root: Path, name: str) -> tuple[Path, Path]:
    target = root / "targets" / name
    if not target.exists():
        zoo.build(name, target)
    draft = root / "drafts" / name
    if not draft.exists():
        zoo_draft(target, draft, release="0.5.14")
    return target, draft


def checked(root: Path, name: str, engine: str = "sglang") -> list[Finding]:
    target, draft = pair(root, name)
    params = LaunchParams.model_validate(
        {"engine": engine, "model": str(target), "draft": str(draft), "depth": 3, "port": free_port()}
    )
    shm = root / "shm"
    shm.mkdir(exist_ok=True)
    return prepare_launch(params, host=GPU_HOST, gpus=(0,), shm_dir=shm, use_sglang_parser=False).findings


@pytest.mark.parametrize("name", sorted(zoo.REFUSED))
def test_a_refused_class_is_an_error_said_once(root: Path, name: str) -> None:
    found = [f for f in checked(root, name) if f.code == CODE]
    assert len(found) == 1, found  # the launch check's, not again from the draft doctor
    assert found[0].severity is Severity.ERROR
    assert "SGLang 0.5.14 cannot serve EAGLE-3" in found[0].message
    assert "set_eagle3_layers_to_capture" in found[0].message
    reference = [f for f in checked(root, name, engine="reference") if f.code == CODE]
    assert [f.severity for f in reference] == [Severity.WARNING]  # the reference engine serves it
    assert "reference engine serves it here" in reference[0].message


@pytest.mark.parametrize("name", ["llama", "deepseek_v3", "kimi_k25", "gemma3_multimodal"])
def test_served_classes_pass_the_class_check(root: Path, name: str) -> None:
    findings = checked(root, name)
    assert CODE not in {f.code for f in findings}
    assert "TARGET_AUX_LAYERS_COLLIDE" not in {f.code for f in findings}


def test_the_dry_run_command_refuses_a_mixtral_target_for_the_installed_sglang(root: Path) -> None:
    target, draft = pair(root, "mixtral")
    spec = root / "mixtral-spec.json"
    spec.write_text(json.dumps({"engine": "sglang", "model": str(target), "draft": str(draft), "depth": 3}))
    argv = [sys.executable, "-m", "cli.main", "launch", "--dry-run", "-f", str(spec), "--json"]
    done = subprocess.run(
        argv, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    (refused,) = [f for f in report["findings"] if f["code"] == CODE]
    assert (
        f"SGLang {installed_sglang_version()} cannot serve EAGLE-3 for MixtralForCausalLM"
        in refused["message"]
    )
    assert "Traceback" not in done.stdout + done.stderr
