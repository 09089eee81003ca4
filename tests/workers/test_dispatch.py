"""Dispatch end to end: the real API app, real Redis, real PostgreSQL and real `eyas worker` processes."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.config import Settings
from app.core.db import session_scope
from app.core.queue import send_job
from app.jobs import lifecycle, repository
from app.maintenance.loop import tick
from app.models.base import utcnow
from app.models.job import Job
from drafting import proc
from tests.app.test_jobs_api import register_host, register_if_new
from tests.conftest import ROOT, WorkerProcess, worker_env
from testsupport.timing import eventually

Headers = dict[str, str]


def submit(client: TestClient, headers: Headers, host: str = "gpu-a", **body: Any) -> dict[str, Any]:
    register_if_new(client.app.state.settings, host)  # type: ignore[attr-defined]
    response = client.post("/v1/jobs", json={"kind": "selftest", "host": host, **body}, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def wait_for(client: TestClient, headers: Headers, job_id: str, timeout: float = 60) -> dict[str, Any]:
    job = client.get(f"/v1/jobs/{job_id}/wait", params={"timeout": timeout}, headers=headers).json()
    assert job["terminal"], job
    return job


def wait_state(
    client: TestClient, headers: Headers, job_id: str, state: str, timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        if job["state"] == state:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job never became {state}: {job}")


def log_text(client: TestClient, headers: Headers, job_id: str) -> str:
    return client.get(
        f"/v1/jobs/{job_id}/logs", params={"format": "text", "limit": 5000}, headers=headers
    ).text


def test_a_job_runs_on_its_hosts_worker(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 4, "stderr_lines": 1})
    done = wait_for(client, admin, job["id"])
    assert done["state"] == "succeeded", done
    assert done["exit_code"] == 0
    assert done["result"] == {"lines": 4, "stderr_lines": 1}
    assert done["worker"].startswith("gpu-a@")
    text = log_text(client, admin, job["id"])
    stdout = [ln for ln in text.splitlines() if ln.startswith("line ")]
    assert stdout == ["line 0", "line 1", "line 2", "line 3"]  # stderr may interleave: order within a stream
    assert "err 0" in text
    states = [e["to_state"] for e in client.get(f"/v1/jobs/{job['id']}/events", headers=admin).json()]
    assert states == ["queued", "starting", "running", "succeeded"]
    hosts = client.get("/v1/hosts", headers=admin).json()
    assert hosts[0]["name"] == "gpu-a"
    assert hosts[0]["online"] is True
    assert hosts[0]["gpu_count"] == 0
    assert "NVML" in hosts[0]["gpu_error"]


def test_nonzero_exit_fails_with_the_exit_code_and_dependents_fail(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 1, "exit_code": 7})
    child = submit(client, admin, depends_on=[job["id"]])
    done = wait_for(client, admin, job["id"])
    assert done["state"] == "failed"
    assert done["exit_code"] == 7
    assert done["termination_reason"] == "NONZERO_EXIT"
    after = client.get(f"/v1/jobs/{child['id']}", headers=admin).json()
    assert after["state"] == "failed"
    assert after["termination_reason"] == "DEPENDENCY_FAILED"


def test_dependent_job_starts_after_its_dependency_succeeds(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    first = submit(client, admin, params={"sleep_s": 0.5})
    second = submit(client, admin, depends_on=[first["id"]])
    assert second["state"] == "pending"
    done = wait_for(client, admin, second["id"])
    assert done["state"] == "succeeded"
    first_done = client.get(f"/v1/jobs/{first['id']}", headers=admin).json()
    assert done["started_at"] >= first_done["finished_at"]


def test_duplicate_delivery_runs_the_job_once(
    client: TestClient,
    admin: Headers,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    worker = start_worker("gpu-a")
    marker = settings.allowed_roots[0] / f"marker-{uuid.uuid4()}"
    job = submit(client, admin, params={"marker_file": str(marker), "sleep_s": 0.5})
    for _ in range(3):  # the broker delivering the same message again
        assert send_job(settings, job["id"], "gpu-a")
    done = wait_for(client, admin, job["id"])
    refused = f"job {job['id']} is not ours to run"  # the runner's line for a delivery it does not claim
    eventually(lambda: worker.log().count(refused) == 3, within_s=30, what="every duplicate consumed")
    assert done["state"] == "succeeded"
    assert marker.read_text().count("\n") == 1
    assert done["attempt"] == 1


def test_cancel_of_a_running_job_ends_its_process_group(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 1, "sleep_s": 120})
    running = wait_state(client, admin, job["id"], "running")
    pid = running["pid"]
    assert psutil.pid_exists(pid)
    deadline = time.monotonic() + 30  # what it printed before the cancel is kept: let it print first
    while time.monotonic() < deadline and "line 0" not in log_text(client, admin, job["id"]):
        time.sleep(0.1)
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin).json()["state"] == "cancelling"
    done = wait_for(client, admin, job["id"], timeout=30)
    assert done["state"] == "cancelled"
    assert done["termination_reason"] == "USER_CANCELLED"
    assert not _alive(pid)
    assert "line 0" in log_text(client, admin, job["id"])


def test_a_worker_whose_eyas_up_died_stops_its_jobs_and_itself(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    """`eyas up` passes its pid; killed -9 it cannot stop its worker, which must not run on alone."""
    up = proc.spawn([sys.executable, "-c", "import time; time.sleep(600)"])  # stands in for eyas up
    try:
        worker = start_worker("gpu-a", args=["--exit-with-pid", str(up.pid)])
        job = submit(client, admin, params={"lines": 1, "sleep_s": 300})
        stage_pid = wait_state(client, admin, job["id"], "running")["pid"]
    finally:
        up.kill()
        up.wait()
    done = wait_for(client, admin, job["id"], timeout=30)
    assert done["state"] == "failed"
    assert done["termination_reason"] == "WORKER_LOST"
    assert f"the process it served (pid {up.pid}) ended" in done["message"]
    assert not _alive(stage_pid)
    worker.popen.wait(timeout=30)  # the worker itself is gone too, not waiting for a job that never ends
    assert "stopping the running jobs and this worker" in worker.log()


def test_exit_with_pid_must_name_a_running_process(settings: Settings) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker", "--host-name", "h", "--exit-with-pid", "999999999"],
        capture_output=True, text=True, cwd=ROOT, env=worker_env(settings), timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--exit-with-pid 999999999: no such process" in result.stderr


def test_timeout_fails_the_job_and_keeps_its_last_lines(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 3, "sleep_s": 60}, timeout_s=2)
    done = wait_for(client, admin, job["id"], timeout=30)
    assert done["state"] == "failed"
    assert done["termination_reason"] == "TIMEOUT"
    assert "line 2" in log_text(client, admin, job["id"])


def test_gpu_job_on_a_host_without_nvml_fails_with_the_reason(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    # The host had a GPU when the job was submitted, so the API could not refuse it; its worker now starts
    # without NVML and must fail the job fast, with the reason.
    register_host(settings, "fresh-host", gpus=1)
    job = submit(client, admin, host="fresh-host", gpus=1)
    start_worker("fresh-host")
    done = wait_for(client, admin, job["id"])
    assert done["state"] == "failed"
    assert done["termination_reason"] == "NO_GPU"
    assert "NVML" in done["message"]


def test_gpu_check_on_a_machine_without_nvml_succeeds_with_that_verdict(
    client: TestClient, admin: Headers, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    job = client.post("/v1/jobs", json={"kind": "gpu_check", "host": "gpu-a"}, headers=admin).json()
    done = wait_for(client, admin, job["id"])
    assert done["state"] == "succeeded", done
    assert done["result"]["verdict"] == "no_gpus"
    assert "NVML Shared Library Not Found" in done["result"]["nvml_error"]


def test_path_outside_allowed_roots_fails_before_anything_runs(
    client: TestClient,
    admin: Headers,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
    settings: Settings,
) -> None:
    start_worker("gpu-a")
    escape = settings.allowed_roots[0] / f"link-{uuid.uuid4()}"
    escape.symlink_to("/etc")  # a symlink inside the root pointing out of it
    job = submit(client, admin, params={"marker_file": str(escape / "eyas-marker")})
    done = wait_for(client, admin, job["id"])
    assert done["state"] == "failed"
    assert done["termination_reason"] == "PATH_NOT_ALLOWED"
    assert not Path("/etc/eyas-marker").exists()


def test_killed_worker_job_is_lost_and_the_restarted_worker_ends_the_orphan(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = start_worker("gpu-a")
    job = submit(client, admin, params={"lines": 1, "sleep_s": 300})
    running = wait_state(client, admin, job["id"], "running")
    orphan_pid = running["pid"]
    worker.kill9()
    assert _alive(orphan_pid)  # the stage process outlives its worker
    deadline = time.monotonic() + settings.lost_after_s * 2 + 5
    state = "running"
    while time.monotonic() < deadline and state != "failed":
        tick(settings)  # the reaper (the API or any worker runs it every maintenance interval)
        state = client.get(f"/v1/jobs/{job['id']}", headers=admin).json()["state"]
        time.sleep(0.2)
    lost = client.get(f"/v1/jobs/{job['id']}", headers=admin).json()
    assert (lost["state"], lost["termination_reason"]) == ("failed", "WORKER_LOST"), lost
    start_worker("gpu-a")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(orphan_pid):
        time.sleep(0.2)
    assert not _alive(orphan_pid)
    with session_scope(settings) as session:
        assert session.get(Job, uuid.UUID(job["id"])).proc_reaped  # type: ignore[union-attr]


def test_lost_job_with_attempts_left_is_retried(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = start_worker("gpu-a")
    job = submit(client, admin, params={"sleep_s": 300}, max_attempts=2)
    wait_state(client, admin, job["id"], "running")
    worker.kill9()
    start_worker("gpu-a")  # restarts, ends the orphan; the reaper re-queues; the new worker runs attempt 2
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        tick(settings)
        current = client.get(f"/v1/jobs/{job['id']}", headers=admin).json()
        if current["attempt"] == 2 and current["state"] == "running":
            break
        time.sleep(0.3)
    assert (current["attempt"], current["state"]) == (2, "running"), current
    client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin)
    assert wait_for(client, admin, job["id"])["state"] == "cancelled"


def test_a_job_given_up_as_lost_is_stopped_by_its_live_worker_and_runs_once_at_a_time(
    client: TestClient, admin: Headers, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    # A reaper may judge a live worker lost when it cannot see its heartbeats (a network partition between
    # that worker and the database). The job is then queued again; the worker, still running attempt 1,
    # must find at its next heartbeat that the attempt no longer holds the job and end its process, and the
    # end of attempt 1 must not be recorded over attempt 2.
    worker = start_worker("gpu-a", EYAS_WORKER_CONCURRENCY="2")
    job = submit(client, admin, params={"lines": 1, "sleep_s": 300}, max_attempts=2)
    first = wait_state(client, admin, job["id"], "running")
    with session_scope(settings) as session:
        row = session.get(Job, uuid.UUID(job["id"]))
        assert row is not None
        assert lifecycle.lose(session, settings, row, message="judged lost by the test")
    deadline = time.monotonic() + settings.cancel_grace_s + settings.heartbeat_s * 4 + 5
    while time.monotonic() < deadline and _alive(first["pid"]):
        time.sleep(0.1)
    assert not _alive(first["pid"]), "attempt 1 still runs after the job was given up"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        tick(settings)  # re-sends the queued job if its message went nowhere
        second = client.get(f"/v1/jobs/{job['id']}", headers=admin).json()
        if second["attempt"] == 2 and second["state"] == "running":
            break
        time.sleep(0.3)
    assert (second["attempt"], second["state"]) == (2, "running"), second
    assert second["pid"] != first["pid"]
    not_recorded = f"job {job['id']}: attempt 1 was given up as lost; its end is not recorded"
    eventually(lambda: not_recorded in worker.log(), within_s=30, what="attempt 1's end refused")
    assert client.get(f"/v1/jobs/{job['id']}", headers=admin).json()["state"] == "running"
    client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin)
    assert wait_for(client, admin, job["id"])["state"] == "cancelled"


def test_the_reconciler_and_the_reaper_never_hold_up_a_running_jobs_heartbeat(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    # Seen in the fault scenario: the reconciler marked hundreds of jobs re-sent in one long transaction,
    # also jobs claimed meanwhile; their heartbeats waited on those row locks and the reapers, which read
    # without waiting, failed them WORKER_LOST on live workers.
    job_id = uuid.UUID(submit(client, admin, host="nowhere", params={"sleep_s": 1})["id"])
    with session_scope(settings) as session:
        claimed = lifecycle.claim(session, job_id=job_id, host="nowhere", worker="w1")
        assert claimed is not None
        lifecycle.mark_running(session, job_id=job_id, pid=1, pgid=1, create_time=None)
    with session_scope(settings) as reconciler:
        repository.mark_dispatched(reconciler, job_id, utcnow())  # a job it read as queued, claimed since
        with session_scope(settings) as worker:
            worker.execute(text("SET LOCAL lock_timeout = '2s'"))
            assert not lifecycle.heartbeat(worker, job_id=job_id, worker="w1", attempt=claimed.attempt)
    with session_scope(settings) as session:  # its heartbeat is now well past the lost-after period
        session.execute(
            text("UPDATE job SET heartbeat_at = now() - interval '1 hour' WHERE id = :id"), {"id": job_id}
        )
    with session_scope(settings) as recorder:
        recorder.execute(text("SELECT 1 FROM job WHERE id = :id FOR UPDATE"), {"id": job_id})  # its end, say
        with session_scope(settings) as reaper:
            reaper.execute(text("SET LOCAL lock_timeout = '2s'"))
            assert lifecycle.reap_lost(reaper, settings) == []  # not judged while someone writes it
    with session_scope(settings) as reaper:
        assert lifecycle.reap_lost(reaper, settings) == [job_id]  # and judged once nobody does


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
