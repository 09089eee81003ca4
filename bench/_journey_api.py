"""eyas's API as the GPU journeys drive it: an `eyas up` of their own for the length of the command (or an
eyas already running), a pipeline or a job followed to its end, and the report written beside it."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench._run import ROOT
from drafting import proc
from drafting.serving.launch.host_checks import free_port

TERMINAL = ("succeeded", "failed", "cancelled")
POLL_S = 3.0
READY_S = 180.0  # `eyas up` answers once its worker has registered the host (NVML, the GPU gate's probe)


@contextmanager
def connected(
    work: Path,
    out: Path,
    *,
    host: str,
    url: str | None,
    token_file: Path | None,
    roots: tuple[Path, ...] = (),
) -> Iterator[httpx.Client]:
    """A client of eyas: the one at `url`, its token read from `token_file`; or an `eyas up` started here for
    as long as the block runs (its data in WORK/data, the host named `host`, WORK and `roots` the paths jobs
    may use, its log OUT/eyas_up.log)."""
    if url is not None:
        if token_file is None:
            raise SystemExit("--url needs --token-file (a file holding a submit-scoped token)")
        with _client(url, token_file.read_text().strip()) as http:
            yield http
        return
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [sys.executable, "-m", "cli.main", "up", "--port", str(port), "--data-dir", str(work / "data")]
    command += ["--host-name", host]
    for root in (work, *roots):
        command += ["--allow-root", str(root)]
    up = proc.spawn(command, cwd=ROOT, output=out / "eyas_up.log")
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, up, out / "eyas_up.log")
        with _client(base, (work / "data" / "admin.token").read_text().strip()) as http:
            yield http
    finally:
        proc.terminate_group(up.pid, grace_s=30, popen=up)


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _wait_ready(base: str, up: Any, log: Path) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if up.poll() is not None:
            raise SystemExit(f"eyas up exited ({up.returncode}): see {log}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"eyas up did not answer in {READY_S:.0f} s: see {log}")


def posted(http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The created resource; the API's refusal (its problem+json) ends the command, nothing posted."""
    created = http.post(path, json=body)
    if created.status_code != 201:
        raise SystemExit(f"POST {path} refused ({created.status_code}): {created.text}")
    resource: dict[str, Any] = created.json()
    return resource


def follow_pipeline(http: httpx.Client, pipeline_id: str) -> dict[str, Any]:
    """The pipeline once it has ended, printing each change of its steps' states and progress."""
    began, last = time.monotonic(), ""
    while True:
        pipeline: dict[str, Any] = http.get(f"/v1/pipelines/{pipeline_id}").json()
        line = " ".join(
            f"{j['pipeline_step']}={j['state']}:{(j.get('progress') or 0):.2f}" for j in pipeline["jobs"]
        )
        if line != last:
            print(f"[{time.monotonic() - began:5.0f}s] {pipeline['state']}: {line}", flush=True)
            last = line
        if pipeline["state"] in TERMINAL:
            return pipeline
        time.sleep(POLL_S)


def follow_job(http: httpx.Client, job_id: str) -> dict[str, Any]:
    """The job once it has ended, printing each change of its state and progress."""
    last = ""
    while True:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
        line = f"{job['kind']} {job['state']} {(job.get('progress') or 0):.2f}"
        if line != last:
            print(line, flush=True)
            last = line
        if job["state"] in TERMINAL:
            return job
        time.sleep(POLL_S)


def job_logs(http: httpx.Client, jobs: list[dict[str, Any]], lines: int = 60) -> str:
    """Each job's state and the last `lines` lines of its log."""
    logs = []
    for job in jobs:
        tail = http.get(f"/v1/jobs/{job['id']}/logs", params={"tail": lines, "format": "text"}).text
        head = f"===== {job.get('pipeline_step') or job['kind']} {job['state']} {job['termination_reason']}"
        logs.append(f"{head} {job['message']}\n{tail}")
    return "\n".join(logs)


def write_report(http: httpx.Client, pipeline: dict[str, Any], out: Path) -> None:
    """OUT/pipeline.json (every job with its params and result), OUT/job_logs.txt, OUT/serving.json (the
    benchmark tables and servers), and OUT/train_params.json (the train step's params, for bench.recipes and
    the reference trainers); each eval, benchmark and train result's head printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "pipeline.json").write_text(json.dumps(pipeline, indent=2))
    (out / "job_logs.txt").write_text(job_logs(http, pipeline["jobs"]))
    serving = {
        "benchmarks": http.get("/v1/benchmarks").json()["items"],
        "servers": http.get("/v1/servers").json()["items"],
    }
    (out / "serving.json").write_text(json.dumps(serving, indent=2))
    train = step_job(pipeline, "train")
    if train is not None:
        (out / "train_params.json").write_text(json.dumps(train["params"], indent=2))
    for job in pipeline["jobs"]:
        if job["kind"] in ("eval", "benchmark", "train"):
            print(f"== {job['pipeline_step']} {job['state']}: {json.dumps(job['result'])[:1500]}", flush=True)


def step_job(pipeline: dict[str, Any], step: str) -> dict[str, Any] | None:
    """The pipeline's job for `step` (jobs are keyed by step: with a held-out set two share a kind)."""
    return next((j for j in pipeline["jobs"] if j["pipeline_step"] == step), None)
