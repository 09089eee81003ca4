"""`eyas launch --dry-run` as a subprocess: on this machine (no server), and on a host through the API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.config import Settings
from app.core.security import Scope
from cli.demo.constructed import successor_target
from tests.conftest import ROOT, WorkerProcess, free_port, make_token, worker_env


def eyas_launch(
    spec: dict[str, Any], folder: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    file = folder / f"spec-{len(list(folder.glob('spec-*.json')))}.json"
    file.write_text(json.dumps(spec))
    argv = [sys.executable, "-m", "cli.main", "launch", "--dry-run", "-f", str(file), *args]
    return subprocess.run(
        argv, cwd=ROOT, env=env or dict(os.environ), capture_output=True, text=True, timeout=300, check=False
    )


def codes(done: subprocess.CompletedProcess[str]) -> set[str]:
    return {f["code"] for f in json.loads(done.stdout)["findings"]}


def test_a_local_dry_run_checks_on_this_machine_with_exit_codes(tmp_path: Path) -> None:
    target = successor_target(tmp_path / "target", heads=4, kv_heads=2)
    good = {"engine": "reference", "model": str(target), "port": free_port()}
    done = eyas_launch(good, tmp_path, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["where"] == "local"
    assert "drafting.serving.engine.reference_engine" in report["argv"]

    wide = {"engine": "sglang", "model": str(target), "tp_size": 3, "port": free_port()}
    done = eyas_launch(wide, tmp_path, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    # SGLang's head rule, and this machine's GPUs (none here) rather than the none a dry run holds
    assert {"TP_SIZE_HEADS_MISMATCH", "TP_EXCEEDS_GPUS"} <= codes(done)
    text = eyas_launch(wide, tmp_path)
    assert text.returncode == 1
    assert "TP_SIZE_HEADS_MISMATCH" in text.stdout
    assert "use tp_size 1, 2 or 4" in text.stdout
    assert "refused:" in text.stdout
    assert "sglang.launch_server" in text.stdout

    helping = eyas_launch({**good, "extra_args": ["--help"]}, tmp_path, "--json")
    assert helping.returncode == 2
    (finding,) = json.loads(helping.stdout)["findings"]
    assert finding["code"] == "INVALID_SPEC"
    assert "--help" in finding["message"]


def test_a_dry_run_on_a_host_goes_through_the_api(
    api_server: str, settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    start_worker("gpu-a")
    token = make_token(settings, Scope.SUBMIT)
    env = {**worker_env(settings), "EYAS_TOKEN": token}
    target = successor_target(settings.allowed_roots[0] / "cli-launch" / "target")
    good = {"engine": "reference", "model": str(target), "port": free_port()}
    remote = ("--host", "gpu-a", "--url", api_server, "--json")
    done = eyas_launch(good, tmp_path, *remote, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["where"] == "gpu-a"
    assert report["job_id"]

    foreign = eyas_launch(
        {**good, "engine": "sglang", "extra_args": ["--num-speculative-tokens", "3"]},
        tmp_path,
        *remote,
        env=env,
    )
    assert foreign.returncode == 1, foreign.stdout + foreign.stderr
    assert "UNKNOWN_FLAG" in codes(foreign)

    refused = eyas_launch({**good, "extra_args": ["--version"]}, tmp_path, *remote, env=env)
    assert refused.returncode == 2
    assert "--version" in json.loads(refused.stdout)["findings"][0]["message"]
