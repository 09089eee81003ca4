"""Outages of one service at a time: the API answers 503 problem+json while PostgreSQL is down and recovers
by itself; workers reconnect to a restarted Redis by themselves; a database restart does not lose healthy
jobs, neither those running through it nor those that end while it is down."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from tests.app.test_jobs_api import register_host
from tests.reliability._services import wait_until
from tests.reliability._stack import Stack, private_stack

# A host that registered and runs no worker: its jobs stay queued.
IDLE_HOST = "idle-host"


def submit(http: httpx.Client, host: str, **params: Any) -> str:
    response = http.post("/v1/jobs", json={"kind": "selftest", "host": host, "params": params})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def wait_terminal(http: httpx.Client, job_id: str, timeout_s: float = 30) -> dict[str, Any]:
    job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}/wait", params={"timeout": timeout_s}).json()
    return job


def assert_problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == code


def test_api_answers_503_while_the_database_is_down_and_recovers_without_a_restart(stack: Stack) -> None:
    register_host(stack.settings, IDLE_HOST)
    api = stack.start_api()
    with httpx.Client(base_url=stack.url, headers=stack.headers, timeout=30) as http:
        job_id = submit(http, IDLE_HOST)
        stack.pg.stop()
        try:
            assert_problem(http.get(f"/v1/jobs/{job_id}"), 503, "DATABASE_UNAVAILABLE")
            assert_problem(http.get("/v1/jobs"), 503, "DATABASE_UNAVAILABLE")
            body = {"kind": "selftest", "host": IDLE_HOST}
            assert_problem(http.post("/v1/jobs", json=body), 503, "DATABASE_UNAVAILABLE")
            ready = http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["database"]["ok"] is False
            assert http.get("/healthz").status_code == 200  # the process itself is fine
        finally:
            stack.pg.start()
        recovered_s = wait_until(lambda: http.get(f"/v1/jobs/{job_id}").status_code == 200, 30, "recovery")
        assert recovered_s < 5, f"the API took {recovered_s:.1f} s to use the restarted database"
        assert http.post("/v1/jobs", json={"kind": "selftest", "host": IDLE_HOST}).status_code == 201
        assert http.get("/readyz").status_code == 200
    assert api.alive(), "recovered without a restart"


def test_an_idle_worker_reconnects_to_a_restarted_broker_by_itself(stack: Stack) -> None:
    stack.start_api()
    worker = stack.start_worker("rel-a")
    stack.redis.stop()
    time.sleep(1)  # the outage under test: the broker is away for a second
    stack.redis.start()
    with httpx.Client(base_url=stack.url, headers=stack.headers, timeout=60) as http:
        job = wait_terminal(http, submit(http, "rel-a", lines=1))
    assert job["state"] == "succeeded", job
    assert worker.alive()


def test_a_worker_running_jobs_survives_a_broker_restart(stack: Stack) -> None:
    # Fewer running jobs than the worker's concurrency: its consumer holds unacked messages while it waits
    # for more, which is the state in which the reconnect fails (every time on this machine).
    stack.start_api()
    worker = stack.start_worker("rel-a", EYAS_WORKER_CONCURRENCY="4")
    with httpx.Client(base_url=stack.url, headers=stack.headers, timeout=60) as http:
        running = [submit(http, "rel-a", sleep_s=4) for _ in range(2)]
        wait_until(
            lambda: all(http.get(f"/v1/jobs/{j}").json()["state"] == "running" for j in running), 30, "run"
        )
        stack.redis.stop()
        time.sleep(1)  # the outage under test: the broker is away for a second
        stack.redis.start()
        after = wait_terminal(http, submit(http, "rel-a", lines=1), timeout_s=10)
        assert after["state"] == "succeeded", f"a job sent after the restart was not run: {after['state']}"
        assert [wait_terminal(http, j)["state"] for j in running] == ["succeeded"] * 2
    assert worker.alive(), worker.log()[-2000:]


def test_a_running_job_is_not_lost_when_the_database_restarts(stack: Stack) -> None:
    stack.start_api()
    worker = stack.start_worker("rel-a")
    with httpx.Client(base_url=stack.url, headers=stack.headers, timeout=60) as http:
        job_id = submit(http, "rel-a", lines=1, sleep_s=8)
        wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["state"] == "running", 30, "running")
        stack.pg.stop()
        time.sleep(stack.settings.lost_after_s + 1)  # the outage under test: every heartbeat goes stale
        # The worker's pool needs a moment to reconnect after the restart (pre-ping, next beat); hold it
        # for 1.5 s, less than the lost-after time, while the API's maintenance loop sees the database back.
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            stack.pg.start()
            time.sleep(1.5)  # the hold under test
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        job = wait_terminal(http, job_id)
    assert (job["state"], job["termination_reason"]) == ("succeeded", "SUCCEEDED"), job


def test_jobs_that_end_while_the_database_is_down_are_recorded_not_lost(tmp_path: Path) -> None:
    # A job is lost 1 s after its last heartbeat here; PostgreSQL stays down for 3 s, and every job's process
    # ends inside that outage, so each worker must keep the job alive (heartbeats) until its end is stored.
    # Before the fix the heartbeat stopped with the process and the end waited on the database with a
    # backoff of up to 2 s: the reapers (the API's and the worker's) failed those jobs WORKER_LOST.
    with private_stack(tmp_path, heartbeat_s=0.25, lost_after_heartbeats=4) as stack:
        stack.start_api()
        worker = stack.start_worker("rel-a", EYAS_WORKER_CONCURRENCY="4")
        with httpx.Client(base_url=stack.url, headers=stack.headers, timeout=60) as http:
            jobs = [submit(http, "rel-a", lines=1, sleep_s=1.0) for _ in range(4)]
            wait_until(
                lambda: all(http.get(f"/v1/jobs/{j}").json()["state"] == "running" for j in jobs), 30, "run"
            )
            stack.pg.stop()
            time.sleep(stack.settings.lost_after_s * 3)  # the outage under test
            stack.pg.start()
            ended = [wait_terminal(http, j) for j in jobs]
        assert worker.alive(), worker.log()[-2000:]
    outcomes = [(j["state"], j["termination_reason"], j["message"]) for j in ended]
    assert outcomes == [("succeeded", "SUCCEEDED", None)] * len(jobs), outcomes


def test_a_submission_while_the_broker_is_down_answers_promptly(stack: Stack) -> None:
    register_host(stack.settings, IDLE_HOST)
    stack.start_api()
    with httpx.Client(base_url=stack.url, headers=stack.headers, timeout=60) as http:
        submit(http, IDLE_HOST)
        stack.redis.stop()
        slowest = 0.0
        for _ in range(3):
            started = time.monotonic()
            submit(http, IDLE_HOST)  # still 201: the reconciler sends it once Redis is back
            slowest = max(slowest, time.monotonic() - started)
    assert slowest < 1.0, f"a submission took {slowest:.1f} s while the broker was down"
