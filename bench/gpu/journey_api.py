"""The real-model journey's side of eyas's API on the GPU host: the `eyas up` it starts there, the client, the
pipeline `start` posted and its train job, and a sweep job's run. real_model.py's phases and the phase
modules beside it (side_by_side_phases.py, recipe_sweep.py) share these, so none imports another's script.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:8000"

# The pipeline's train settings that the recipes and speculators' driver carry over (the driver has a flag for
# each), so every run beside the pipeline's trains on the same schedule and holds out the same rows.
TRAIN_SETTINGS = (
    "epochs", "ttt_steps", "lr", "batch_size", "max_len", "step_decay", "warmup_ratio", "draft_vocab_size",
    "val_fraction", "seed",
)  # fmt: skip
SIDE_BY_SIDE_CONFIGS = "3,1,4 5,1,6 7,1,8"  # acceptance by depth is what the trainers are compared on


def run_sweep_job(
    http: httpx.Client, spec: dict[str, Any], began: float, deadline_s: float, id_file: Path
) -> dict[str, Any]:
    """A benchmark job (a sweep spec as speculators_side_by_side.sweep_job writes it) at two rounds, the
    fewest a sweep takes (acceptance is compared, not speed), followed until it ends or the deadline. Its id
    is kept in `id_file`: a later call (the first ended inside the sweep, ~400 s for three chains) follows
    that job instead of posting a second one behind it."""
    if id_file.exists():
        job_id = id_file.read_text().strip()
        print(f"following the sweep job an earlier call posted: {job_id}", flush=True)
    else:
        spec["params"]["repeats"] = 2
        created = http.post("/v1/jobs", json={"kind": "benchmark", **spec})
        if created.status_code != 201:
            raise SystemExit(created.text)
        job_id = created.json()["id"]
        id_file.write_text(job_id)
    while True:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled") or time.monotonic() - began > deadline_s:
            return job
        time.sleep(3)


def process_ended(pid: int) -> bool:
    """Whether `pid` has exited: gone, or a zombie no one reaped (a detached child outlives the device command
    that started it, and the GPU host's init may not reap it at once)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def detached(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """`command` in its own session (it outlives the device command; killed by its group), output to a log."""
    with open(log_path, "ab") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)


def eyas_up(work: Path, out: Path) -> None:
    """`eyas up` in its own session, so a command ending on this machine need not end it."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "cli.main", "up", "--port", "8000", "--data-dir", str(work / "data")]
    detached([*command, "--host-name", "h200", "--allow-root", str(work)], out / "eyas_up.log")
    deadline = time.monotonic() + 120
    while not answers():
        if time.monotonic() > deadline:
            raise SystemExit("eyas up did not answer in 120 s: see eyas_up.log")
        time.sleep(0.5)


def answers() -> bool:
    try:
        return httpx.get(f"{URL}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def posted_pipeline(http: httpx.Client, work: Path) -> dict[str, Any]:
    """The pipeline `start` posted (its id in WORK/pipeline_id), as the API reads it."""
    pipeline: dict[str, Any] = http.get(f"/v1/pipelines/{(work / 'pipeline_id').read_text().strip()}").json()
    return pipeline


def train_job(pipeline: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's train job (jobs keyed by step: with held_out two share a kind)."""
    job: dict[str, Any] = next(j for j in pipeline["jobs"] if j["pipeline_step"] == "train")
    return job


def client(work: Path) -> httpx.Client:
    token = (work / "data" / "admin.token").read_text().strip()
    return httpx.Client(base_url=URL, headers={"Authorization": f"Bearer {token}"}, timeout=60)
