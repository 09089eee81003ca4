"""A worker host that disappears: its worker and its jobs' processes are killed and its log folder is gone.

The API's maintenance loop (the only reaper left: no other worker runs) must fail the job WORKER_LOST within
the documented time, free its GPU lease, mark the server it ran failed, and keep the log lines already
shipped readable.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from app.core.config import Settings
from app.core.db import session_scope
from app.hosts import repository as hosts_repo
from app.servers import service as servers
from tests.conftest import WorkerProcess
from tests.reliability._services import wait_until

Headers = dict[str, str]


def test_a_vanished_host_loses_its_jobs_in_time_and_keeps_their_shipped_logs(
    api_server: str, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = start_worker("doomed")
    with httpx.Client(base_url=api_server, headers=admin, timeout=30) as http:
        body = {"kind": "selftest", "host": "doomed", "params": {"lines": 5, "sleep_s": 300}}
        job_id = http.post("/v1/jobs", json=body).json()["id"]
        wait_until(
            lambda: "line 4" in http.get(f"/v1/jobs/{job_id}/logs", params={"format": "text"}).text,
            30,
            "logs",
        )
        running = http.get(f"/v1/jobs/{job_id}").json()
        assert running["state"] == "running"
        stand_in_server_and_lease(settings, job_id, running)

        vanished_at = vanish(worker, running["pid"], settings.resolved_log_dir() / f"{job_id}.log")
        lost = wait_lost(http, job_id)
        took_s = time.monotonic() - vanished_at
        # Documented: heartbeat x lost-after-heartbeats, found by the next maintenance tick.
        budget_s = settings.lost_after_s + settings.maintenance_interval_s + 2.0
        assert took_s <= budget_s, f"WORKER_LOST after {took_s:.1f} s (budget {budget_s:.1f} s)"
        assert lost["message"].startswith("no heartbeat from worker doomed@")

        assert http.get("/v1/hosts/doomed").json()["leases"] == []
        server = http.get("/v1/servers").json()["items"][0]
        assert (server["state"], server["message"]) == ("failed", "its worker was lost")
        text = http.get(f"/v1/jobs/{job_id}/logs", params={"format": "text"}).text
        assert all(f"line {i}" in text for i in range(5)), text
    print({"worker_lost_after_s": round(took_s, 2), "budget_s": budget_s})


def stand_in_server_and_lease(settings: Settings, job_id: str, running: dict[str, Any]) -> None:
    """What a launch job would hold: a server row (as its `server` event makes) and a GPU lease. This host
    has no GPU, so the lease row is written directly, as the runner's lease step would."""
    event = {"state": "ready", "url": "http://127.0.0.1:30000", "pid": running["pid"], "engine": "reference"}
    with session_scope(settings) as session:
        servers.record_server_event(session, job_id=uuid.UUID(job_id), host="doomed", event=event)
        hosts_repo.add_leases(session, "doomed", [0], uuid.UUID(job_id))


def vanish(worker: WorkerProcess, job_pid: int, log_file: Path) -> float:
    """kill -9 the worker and the job's process group, and delete the job's log file on the host."""
    worker.kill9()
    os.killpg(job_pid, signal.SIGKILL)
    assert log_file.exists()
    log_file.unlink()
    return time.monotonic()


def wait_lost(http: httpx.Client, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def lost() -> bool:
        found.update(http.get(f"/v1/jobs/{job_id}").json())
        return bool(found["state"] == "failed")

    wait_until(lost, 30, "the job failing")
    assert found["termination_reason"] == "WORKER_LOST", found
    return found
