"""/metrics parsed by prometheus-client's own parser; servers, benchmarks and artifacts read back."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs import lifecycle
from app.jobs.lifecycle import Outcome, finish
from app.jobs.states import JobState
from app.logs import repository as logs_repo
from app.servers import service as servers
from tests.app.test_jobs_api import register_host, submit


def test_metrics_exposition_has_the_expected_series(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    register_host(settings, "gpu-a", gpus=2)
    submit(client, admin)
    submit(client, admin, kind="gpu_check")
    assert client.get("/metrics").status_code == 401
    response = client.get("/metrics", headers=admin)
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert {
        "eyas_jobs",
        "eyas_dispatch_latency_seconds",
        "eyas_log_lines_shipped",
        "eyas_hosts_online",
        "eyas_gpu_memory_used_mib",
        "eyas_servers_ready",
        "eyas_server_accept_length",
    } <= set(families)
    jobs = {(s.labels["kind"], s.labels["state"]): s.value for s in families["eyas_jobs"].samples}
    assert jobs == {("selftest", "queued"): 1.0, ("gpu_check", "queued"): 1.0}
    assert families["eyas_hosts_online"].samples[0].value == 1.0
    gpus = {s.labels["gpu"] for s in families["eyas_gpu_memory_used_mib"].samples}
    assert gpus == {"0", "1"}


def test_server_rows_follow_the_launch_jobs_events(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    job = submit(client, admin)
    job_id = uuid.UUID(job["id"])
    with session_scope(settings) as session:
        servers.record_server_event(
            session,
            job_id=job_id,
            host="gpu-a",
            event={
                "state": "starting",
                "url": "http://127.0.0.1:30000",
                "argv": ["python", "-m", "sglang.launch_server"],
                "pid": 123,
                "engine": "sglang",
            },
        )
        servers.record_server_event(
            session, job_id=job_id, host="gpu-a", event={"state": "ready", "accept_len": 2.7}
        )
    listed = client.get("/v1/servers", headers=admin).json()["items"]
    assert len(listed) == 1
    server = listed[0]
    assert (server["state"], server["last_accept_len"], server["engine"]) == ("ready", 2.7, "sglang")
    assert server["ready_at"] is not None
    stopped = client.post(f"/v1/servers/{server['id']}/stop", headers=admin).json()
    assert stopped["state"] == "stopping"
    assert client.get(f"/v1/jobs/{job['id']}", headers=admin).json()["state"] == "cancelled"
    assert client.get(f"/v1/servers/{uuid.uuid4()}", headers=admin).status_code == 404


def test_a_servers_log_pages_as_its_jobs_log_does(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    job_id = uuid.UUID(str(submit(client, admin)["id"]))
    now = datetime.now(UTC)
    with session_scope(settings) as session:
        server = servers.record_server_event(session, job_id=job_id, host="gpu-a", event={"state": "ready"})
        rows = [
            (1, now, "stdout", "loading"),
            (2, now, "stderr", "warning: slow"),
            (3, now, "stdout", "ready"),
        ]
        logs_repo.insert_lines(session, job_id, rows)
    query = {"stream": "stderr", "format": "text"}
    for url in (f"/v1/jobs/{job_id}/logs", f"/v1/servers/{server.id}/logs"):
        text_page = client.get(url, params=query, headers=admin)
        assert text_page.text == "warning: slow\n"
        assert (text_page.headers["x-next-cursor"], text_page.headers["x-log-complete"]) == ("3", "false")
        tail = client.get(url, params={"tail": 1}, headers=admin).json()
        assert [line["text"] for line in tail["lines"]] == ["ready"]
    over = client.get(f"/v1/servers/{server.id}/logs", params={"limit": 10**6}, headers=admin)
    assert over.status_code == 422


def test_benchmark_table_is_stored_when_the_job_ends_and_served_as_csv(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    job = submit(client, admin, kind="gpu_check")
    rows = [
        {"depth": None, "accept_len": 1.0, "output_tok_s": 100.0, "speedup": 1.0},
        {"depth": 5, "accept_len": 2.5, "output_tok_s": 180.0, "speedup": 1.8, "note": "=cmd|x"},
    ]
    with session_scope(settings) as session:
        session.execute(text("UPDATE job SET state='running', kind='benchmark'"))  # as a worker would
    with session_scope(settings) as session:
        finish(
            session,
            settings,
            job_id=uuid.UUID(job["id"]),
            outcome=Outcome(JobState.SUCCEEDED, "SUCCEEDED", result={"rows": rows, "deployable": True}),
        )
    listed = client.get("/v1/benchmarks", headers=admin).json()["items"]
    assert listed[0]["deployable"] is True
    csv = client.get(f"/v1/benchmarks/{listed[0]['id']}", params={"format": "csv"}, headers=admin)
    assert csv.headers["content-type"].startswith("text/csv")
    lines = csv.text.splitlines()
    assert lines[0] == "depth,accept_len,output_tok_s,speedup,note"
    assert lines[2].endswith('"=cmd|x"')  # a formula-looking cell stays text in a spreadsheet


def test_artifact_lineage_walks_back_through_dependencies(
    client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    first = submit(client, admin)
    second = submit(client, admin, depends_on=[first["id"]])
    with session_scope(settings) as session:
        lifecycle.record_artifact(
            session,
            job_id=uuid.UUID(first["id"]),
            host="gpu-a",
            kind="hidden_states",
            path="/data/hs",
            meta={"bytes": 10},
        )
    with session_scope(settings) as session:
        child = lifecycle.record_artifact(
            session,
            job_id=uuid.UUID(second["id"]),
            host="gpu-a",
            kind="drafter_checkpoint",
            path="/data/ckpt",
            meta={},
        )
        child_id = child.id
    lineage = client.get(f"/v1/artifacts/{child_id}", headers=admin).json()
    assert [a["kind"] for a in lineage["ancestors"]] == ["hidden_states"]
    assert lineage["ancestors"][0]["bytes"] == 10
    assert (
        len(client.get("/v1/artifacts", params={"kind": "hidden_states"}, headers=admin).json()["items"]) == 1
    )
