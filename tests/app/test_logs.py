"""Logs that survive the host: real child processes, real workers, real SSE over a real uvicorn server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from tests.conftest import ROOT, WorkerProcess, worker_env
from tests.workers.test_dispatch import submit, wait_for, wait_state

Headers = dict[str, str]


def all_lines(client: TestClient, headers: Headers, job_id: str, **params: Any) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    cursor = 0
    while True:
        page = client.get(
            f"/v1/jobs/{job_id}/logs", params={"cursor": cursor, "limit": 1000, **params}, headers=headers
        ).json()
        lines += page["lines"]
        if not page["lines"]:
            return lines
        cursor = page["next_cursor"]


def stage_lines(lines: list[dict[str, Any]]) -> list[str]:
    return [line["text"] for line in lines if not line["text"].startswith("[eyas]")]


def sse_events(
    url: str, headers: Headers, job_id: str, last_event_id: int | None = None, stop_after: int | None = None
) -> Iterator[dict[str, Any]]:
    extra = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    with httpx.stream(
        "GET", f"{url}/v1/jobs/{job_id}/logs/stream", headers={**headers, **extra}, timeout=60
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        # httpx asks for gzip; a compressed event stream would sit in the compressor's buffer
        assert "content-encoding" not in response.headers
        event: dict[str, str] = {}
        count = 0
        for raw in response.iter_lines():
            if raw:
                key, _, value = raw.partition(": ")
                event[key] = value
                continue
            if "event" in event:
                yield {"event": event["event"], "id": int(event["id"]), "data": json.loads(event["data"])}
                count += 1
                if event["event"] == "end" or (stop_after is not None and count >= stop_after):
                    return
            event = {}


def test_lines_arrive_in_order_through_paging_tail_and_streams(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 2500, "stderr_lines": 3})
    assert wait_for(client, admin, job["id"])["state"] == "succeeded"
    lines = all_lines(client, admin, job["id"])
    seqs = [line["seq"] for line in lines]
    assert seqs == sorted(seqs)
    assert len(seqs) == len(set(seqs))
    texts = stage_lines(lines)
    assert [t for t in texts if t.startswith("line")] == [f"line {i}" for i in range(2500)]
    assert [t for t in texts if t.startswith("err")] == ["err 0", "err 1", "err 2"]
    tail = client.get(
        f"/v1/jobs/{job['id']}/logs", params={"tail": 5, "stream": "stdout"}, headers=admin
    ).json()
    assert [line["text"] for line in tail["lines"]] == [f"line {i}" for i in range(2495, 2500)]
    assert tail["complete"] is True
    stderr = all_lines(client, admin, job["id"], stream="stderr")
    assert {line["stream"] for line in stderr} == {"stderr"}


def test_sse_follows_live_and_resumes_without_gap_or_duplicate(
    client: TestClient, admin: Headers, api_server: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 60, "lines_per_second": 40})
    wait_state(client, admin, job["id"], "running")
    first = list(sse_events(api_server, admin, job["id"], stop_after=10))
    assert [e["event"] for e in first] == ["line"] * 10
    resumed = list(sse_events(api_server, admin, job["id"], last_event_id=first[-1]["id"]))
    assert resumed[-1]["event"] == "end"
    assert resumed[-1]["data"]["state"] == "succeeded"
    ids = [e["id"] for e in first + resumed[:-1]]
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # contiguous: no gap, no duplicate
    texts = [e["data"]["text"] for e in first + resumed[:-1]]
    assert [t for t in texts if t.startswith("line")] == [f"line {i}" for i in range(60)]


@pytest.mark.parametrize(
    ("params", "action", "state", "reason"),
    [
        ({"lines": 5, "exit_code": 3}, None, "failed", "NONZERO_EXIT"),
        ({"lines": 5, "sleep_s": 60}, "cancel", "cancelled", "USER_CANCELLED"),
        ({"lines": 5, "sleep_s": 60}, "timeout", "failed", "TIMEOUT"),
        ({"lines": 5, "sleep_s": 60}, "sigkill", "failed", "NONZERO_EXIT"),
    ],
)
def test_last_lines_are_kept_however_the_job_ends(
    client: TestClient,
    admin: Headers,
    start_worker: Callable[..., WorkerProcess],
    params: dict[str, Any],
    action: str | None,
    state: str,
    reason: str,
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params=params, **({"timeout_s": 3} if action == "timeout" else {}))
    if action in ("cancel", "sigkill"):
        running = wait_state(client, admin, job["id"], "running")
        deadline = time.monotonic() + 20
        while (
            "line 4" not in stage_lines(all_lines(client, admin, job["id"])) and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        if action == "cancel":
            client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin)
        else:
            os.kill(running["pid"], signal.SIGKILL)
    done = wait_for(client, admin, job["id"])
    assert (done["state"], done["termination_reason"]) == (state, reason)
    # stdout only: the stage's stderr (its error line) may land anywhere between them
    stdout = [line["text"] for line in all_lines(client, admin, job["id"]) if line["stream"] == "stdout"]
    assert stdout[:5] == [f"line {i}" for i in range(5)]


def test_log_survives_the_worker_and_its_host_log_file(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 200, "sleep_s": 120})
    wait_state(client, admin, job["id"], "running")
    deadline = time.monotonic() + 20
    while len(stage_lines(all_lines(client, admin, job["id"]))) < 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    worker.kill9()
    host_file = settings.resolved_log_dir() / f"{job['id']}.log"
    assert host_file.exists()
    host_file.unlink()
    lines = stage_lines(all_lines(client, admin, job["id"]))
    assert lines == [f"line {i}" for i in range(200)]
    running = client.get(f"/v1/jobs/{job['id']}", headers=admin).json()
    os.killpg(running["pid"], signal.SIGKILL)  # the orphaned stage process: end it for the next tests


def test_hostile_output_is_stored_and_rendered_safely(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 2, "line_bytes": 10 * 1024 * 1024})
    assert wait_for(client, admin, job["id"])["state"] == "succeeded"
    lines = stage_lines(all_lines(client, admin, job["id"]))
    assert len(lines) == 2
    assert all("line truncated" in text for text in lines)
    assert all(len(text) < 70_000 for text in lines)


def test_invalid_utf8_nul_and_ansi_from_a_real_child(tmp_path: Path) -> None:
    from drafting import proc
    from workers.logship import LogShipper  # noqa: F401 - the same sink path the worker uses

    lines: list[str] = []
    code = "import sys; sys.stdout.buffer.write(b'\\xff\\x00\\x1b[2J\\x1b]0;title\\x07ok\\n')"
    proc.run_command([sys.executable, "-c", code], on_line=lambda _s, t: lines.append(t))
    assert lines == ["\ufffd\ufffd\x1b[2J\x1b]0;title\x07ok"]
    rendered = json.dumps({"text": lines[0]})
    assert "\\u001b" in rendered  # escape sequences travel escaped in JSON and SSE data


def test_log_endpoints_need_a_token(client: TestClient, admin: Headers, reader: Headers) -> None:
    job = submit(client, admin)
    for path in (f"/v1/jobs/{job['id']}/logs", f"/v1/jobs/{job['id']}/logs/stream"):
        assert client.get(path).status_code == 401
    assert client.get(f"/v1/jobs/{job['id']}/logs", headers=reader).status_code == 200
    assert (
        client.get(f"/v1/jobs/{job['id']}/logs", params={"limit": 10**9}, headers=reader).status_code == 422
    )


def test_cli_logs_follow_exits_with_the_jobs_outcome(
    client: TestClient,
    admin: Headers,
    settings: Settings,
    api_server: str,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 20, "lines_per_second": 20, "exit_code": 4})
    token = admin["Authorization"].split()[1]
    env = {**worker_env(settings), "EYAS_URL": api_server, "EYAS_TOKEN": token}
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "logs", job["id"], "-f"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    printed = [line for line in result.stdout.splitlines() if line.startswith("line")]
    assert printed == [f"line {i}" for i in range(20)]
