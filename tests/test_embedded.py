"""`eyas up` on the embedded default: SQLite database and broker in a temporary data folder, a real worker,
and a job submitted over HTTP that runs to the end."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest

from drafting import proc
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def embedded(tmp_path: Path) -> tuple[str, str, Path]:
    port = free_port()
    data_dir = tmp_path / "data"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    popen = proc.spawn(
        [
            sys.executable,
            "-m",
            "cli.main",
            "up",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--allow-root",
            str(tmp_path),
        ],
        env=env,
        cwd=ROOT,
        output=tmp_path / "up.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, popen, tmp_path / "up.log")
        token = (data_dir / "admin.token").read_text().strip()
        yield url, token, data_dir
    finally:
        proc.terminate_group(popen.pid, grace_s=10, popen=popen)


def _wait_ready(url: str, popen: object, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise TimeoutError(log.read_text())


def test_eyas_up_runs_a_job_submitted_over_http(embedded: tuple[str, str, Path]) -> None:
    url, token, data_dir = embedded
    assert (data_dir / "admin.token").stat().st_mode & 0o777 == 0o600
    assert (data_dir / "eyas.sqlite").exists()
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{url}/v1/jobs").status_code == 401
    job = httpx.post(
        f"{url}/v1/jobs", json={"kind": "selftest", "params": {"lines": 3}}, headers=headers
    ).json()
    done = httpx.get(
        f"{url}/v1/jobs/{job['id']}/wait", params={"timeout": 60}, headers=headers, timeout=70
    ).json()
    assert done["state"] == "succeeded", done
    assert done["host"] == "local"
    text = httpx.get(f"{url}/v1/jobs/{job['id']}/logs", params={"format": "text"}, headers=headers).text
    assert "line 2" in text
    hosts = httpx.get(f"{url}/v1/hosts", headers=headers).json()
    assert [h["name"] for h in hosts] == ["local"]
    assert (data_dir / "logs" / f"{job['id']}.log").exists()
