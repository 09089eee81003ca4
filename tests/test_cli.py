"""The `eyas` CLI as CI uses it: real processes against a real API server and worker; exit codes matter."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from fastapi.testclient import TestClient

from app.core.config import Settings
from tests.app.test_benchmark_compare import record, sweep
from tests.conftest import ROOT, WorkerProcess, worker_env

Headers = dict[str, str]


def eyas(
    settings: Settings, url: str, token: str | None, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {**worker_env(settings), "EYAS_URL": url}
    if token:
        env["EYAS_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_submit_status_wait_and_their_exit_codes(
    settings: Settings, admin: Headers, api_server: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    token = admin["Authorization"].split()[1]
    ok = eyas(settings, api_server, token, "submit", "selftest", "--host", "gpu-a", "-p", "lines=2", "--json")
    assert ok.returncode == 0, ok.stderr
    job = json.loads(ok.stdout)
    assert job["params"]["lines"] == 2
    assert eyas(settings, api_server, token, "wait", job["id"], "--timeout", "60").returncode == 0
    failing = json.loads(
        eyas(
            settings,
            api_server,
            token,
            "submit",
            "selftest",
            "--host",
            "gpu-a",
            "-p",
            "exit_code=3",
            "--json",
        ).stdout
    )
    assert eyas(settings, api_server, token, "wait", failing["id"], "--timeout", "60").returncode == 1
    slow = json.loads(
        eyas(
            settings, api_server, token, "submit", "selftest", "--host", "gpu-a", "-p", "sleep_s=60", "--json"
        ).stdout
    )
    assert eyas(settings, api_server, token, "wait", slow["id"], "--timeout", "1").returncode == 4
    assert eyas(settings, api_server, token, "cancel", slow["id"]).returncode == 0
    assert eyas(settings, api_server, token, "wait", slow["id"], "--timeout", "60").returncode == 3
    status = json.loads(eyas(settings, api_server, token, "status", slow["id"], "--json").stdout)
    assert status["state"] == "cancelled"
    hosts = json.loads(eyas(settings, api_server, token, "hosts", "--json").stdout)
    assert [h["name"] for h in hosts] == ["gpu-a"]


def test_bad_input_gives_clear_errors_and_exit_codes(
    settings: Settings, admin: Headers, api_server: str
) -> None:
    token = admin["Authorization"].split()[1]
    unknown = eyas(settings, api_server, token, "submit", "nope", "--host", "gpu-a")
    assert unknown.returncode == 2
    assert "UNKNOWN_KIND" in unknown.stderr
    bad_param = eyas(settings, api_server, token, "submit", "selftest", "--host", "gpu-a", "-p", "lines=many")
    assert bad_param.returncode == 2
    assert "params.lines" in bad_param.stderr
    assert eyas(settings, api_server, token, "status", "not-a-uuid").returncode == 2
    assert eyas(settings, api_server, None, "hosts").returncode == 2  # no token: 401
    unreachable = eyas(settings, "http://127.0.0.1:9", token, "hosts")
    assert unreachable.returncode == 5
    assert "cannot reach" in unreachable.stderr


def test_tokens_from_the_cli(settings: Settings, admin: Headers, api_server: str) -> None:
    token = admin["Authorization"].split()[1]
    created = eyas(settings, api_server, token, "token", "create", "ci", "--scope", "read", "--json")
    assert created.returncode == 0, created.stderr
    secret = json.loads(created.stdout)["token"]
    assert eyas(settings, api_server, secret, "hosts").returncode == 0
    denied = eyas(settings, api_server, secret, "submit", "selftest", "--host", "gpu-a")
    assert denied.returncode == 2
    assert "FORBIDDEN" in denied.stderr
    assert (
        eyas(settings, api_server, token, "token", "revoke", json.loads(created.stdout)["id"]).returncode == 0
    )
    assert eyas(settings, api_server, secret, "hosts").returncode == 2


def test_token_bootstrap_writes_the_first_admin_token_to_the_database(
    settings: Settings, api_server: str
) -> None:
    made = eyas(settings, api_server, None, "token", "bootstrap", "ops")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("eyas_")
    listed = eyas(settings, api_server, secret, "token", "list", "--json")
    assert listed.returncode == 0
    assert [t["name"] for t in json.loads(listed.stdout)] == ["ops"]
    assert eyas(settings, api_server, None, "token", "bootstrap", "x", "--scope", "root").returncode == 2


def test_compare_two_benchmarks_from_the_cli(
    settings: Settings, admin: Headers, api_server: str, client: TestClient
) -> None:
    """The results are recorded through the finishing path (tests/app/test_benchmark_compare.py's helper),
    the comparison read by the CLI from the live API server."""
    token = admin["Authorization"].split()[1]
    a = record(client, admin, settings, sweep({"5,1,6": [(90, 30)] * 30}))
    b = record(client, admin, settings, sweep({"5,1,6": [(60, 30)] * 30}), draft="/d/[/b]")
    other = record(client, admin, settings, sweep({"5,1,6": [(60, 30)] * 30}, digest="e" * 64))
    table = eyas(settings, api_server, token, "compare", a, b)
    assert table.returncode == 0, table.stderr
    assert "5,1,6" in table.stdout
    assert "a accepts more" in table.stdout
    assert "b: /d/[/b]" in table.stdout  # a path is not rich markup (a stray [/b] would raise)
    body = json.loads(eyas(settings, api_server, token, "compare", a, b, "--json").stdout)
    assert body["configs"][0]["difference"] == 1
    refused = eyas(settings, api_server, token, "compare", a, other)
    assert refused.returncode == 2
    assert "NOT_COMPARABLE" in refused.stderr
    assert "asked different requests" in refused.stderr
    assert eyas(settings, api_server, token, "compare", a, "not-a-uuid").returncode == 2
    # a CI gate: the new draft (a) must be ahead of, or at least not behind, the old one (b)
    assert eyas(settings, api_server, token, "compare", a, b, "--require", "a-ahead").returncode == 0
    behind = eyas(settings, api_server, token, "compare", b, a, "--require", "not-behind", "--json")
    assert behind.returncode == 1
    assert "--require not-behind: not met at 5,1,6" in behind.stderr
    assert json.loads(behind.stdout)["configs"][0]["difference"] == -1, "the comparison is printed first"
    level = record(client, admin, settings, sweep({"5,1,6": [(60, 30)] * 30}))
    assert eyas(settings, api_server, token, "compare", level, b, "--require", "not-behind").returncode == 0
    assert eyas(settings, api_server, token, "compare", level, b, "--require", "a-ahead").returncode == 1
    assert eyas(settings, api_server, token, "compare", a, b, "--require", "better").returncode == 2
