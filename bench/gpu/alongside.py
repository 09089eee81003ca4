"""Training runs beside the real-model pipeline's own, on the same GPU, while its train step runs.

A drafter for SmolLM2-135M is launch-bound and leaves most of an H200 idle, and a device session has 30
minutes: the recipe variants (real_model.RECIPES) and speculators' trainer (issue 15) therefore train at the
same time as the pipeline's train step instead of after the sweep. They share the GPU, so their wall times
compare with each other's (all ran together) and not with a run alone. The pipeline's `gpu_check` refuses the
shared GPU, as it must; `real_model.py wait` waits for these to end (WORK/alongside.done) and retries the
pipeline from that step.

    real_model.py start ... --alongside      # starts `alongside` detached once the pipeline is posted
    real_model.py alongside WORK OUT          # (what start runs) the runs, then WORK/alongside.done
    real_model.py recipe-sweep WORK OUT       # after the pipeline: the best recipe's draft through a sweep
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from real_model import (
    SIDE_BY_SIDE_CONFIGS,
    _client,
    _detached,
    _pipeline,
    _train_params,
    recipes_command,
    run_sweep_job,
    speculators_command,
)

# How long the runs beside the train step may take before they are stopped (recipes.py stops its variants
# itself a minute earlier, keeping their finished epochs): the pipeline's sweep waits for them.
RUNS_DEADLINE_S = 480.0


def alongside(args: argparse.Namespace) -> None:
    """Wait for the pipeline's train step to run, start the recipes and speculators' trainer, wait for
    both (stopping them at RUNS_DEADLINE_S), then write WORK/alongside.done with what happened."""
    work = args.work.resolve()
    (work / "alongside.pid").write_text(str(os.getpid()))
    http = _client(work)
    began = time.monotonic()
    while (step := _train_step(_pipeline(http, work)))["state"] not in ("running", "succeeded"):
        if step["state"] in ("failed", "cancelled") or time.monotonic() - began > 1800:
            _done(work, {"started": False, "train_state": step["state"]})
            return
        time.sleep(3)
    train = _train_params(_pipeline(http, work))
    commands = {
        "recipes": recipes_command(work, train, deadline_s=RUNS_DEADLINE_S - 60),
        "speculators": speculators_command(work, train),
    }
    runs = {name: _detached(command, work / f"alongside_{name}.log") for name, command in commands.items()}
    print(f"started {sorted(runs)} {time.monotonic() - began:.0f} s after the pipeline", flush=True)
    _done(work, {"started": True, "runs": _wait_all(runs, time.monotonic() + RUNS_DEADLINE_S)})


def _train_step(pipeline: dict[str, Any]) -> dict[str, Any]:
    for job in pipeline["jobs"]:
        if job["pipeline_step"] == "train":
            return dict(job)
    return {"state": "not queued" if pipeline["state"] not in ("failed", "cancelled") else pipeline["state"]}


def _wait_all(runs: dict[str, subprocess.Popen[bytes]], deadline: float) -> dict[str, Any]:
    """Each run's exit code and wall time; a run past the deadline loses its whole process group."""
    began, ended = time.monotonic(), {}
    while len(ended) < len(runs):
        for name, process in runs.items():
            if name not in ended and process.poll() is not None:
                ended[name] = {"returncode": process.returncode, "wall_s": round(time.monotonic() - began)}
        if time.monotonic() > deadline:
            for name, process in runs.items():
                if name not in ended:
                    os.killpg(process.pid, signal.SIGKILL)  # it leads its own group (_detached)
                    process.wait()
                    ended[name] = {"returncode": process.returncode, "stopped_at_deadline": True}
        time.sleep(2)
    return ended


def _done(work: Path, record: dict[str, Any]) -> None:
    (work / "alongside.done").write_text(json.dumps(record, indent=2))
    print(json.dumps(record), flush=True)


def wait_for_alongside(work: Path, deadline: float) -> None:
    """Block until WORK/alongside.done exists (or the deadline): until then the GPU is shared."""
    while not (work / "alongside.done").exists() and time.monotonic() < deadline:
        time.sleep(3)
    done = work / "alongside.done"
    print("alongside:", done.read_text() if done.exists() else "still running at the deadline", flush=True)


def recipe_sweep(args: argparse.Namespace) -> None:
    """The recipe with the highest held-out estimate at the sweep's middle depth, if it beats the pipeline's
    own drafter there, through a chain sweep on real SGLang (OUT/recipe_sweep.json): the held-out estimate
    chose it, SGLang says what it serves."""
    work, out = args.work.resolve(), args.out
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    report = json.loads((work / "recipes" / "recipes.json").read_text())
    pipeline = _pipeline(_client(work), work)
    own = next(j for j in pipeline["jobs"] if j["pipeline_step"] == "train")["result"]["best"]
    name, best = best_recipe(report["variants"])
    choice = {"recipe": name, "best": best, "pipeline_best": own}
    if best is None or best["est_accept_len"] <= own["est_accept_len"]:
        (out / "recipe_sweep.json").write_text(json.dumps({**choice, "swept": False}, indent=2))
        print(f"no recipe beats the pipeline's drafter on held-out: {json.dumps(choice)}", flush=True)
        return
    from speculators_side_by_side import sweep_job

    spec = sweep_job(work, Path(best["checkpoint"]), SIDE_BY_SIDE_CONFIGS)
    job = run_sweep_job(_client(work), spec, began, args.deadline_s)
    (out / "recipe_sweep.json").write_text(json.dumps({**choice, "swept": True, "job": job}, indent=2))
    print(f"recipe {name} sweep {job['state']}: {json.dumps(job.get('result'))[:1500]}", flush=True)


def best_recipe(variants: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The finished variant whose chosen epoch has the highest estimate (its `best`, held-out when given)."""
    finished = {n: r["best"] for n, r in variants.items() if r.get("returncode") == 0 and r.get("best")}
    if not finished:
        return None, None
    name = max(finished, key=lambda n: finished[n]["est_accept_len"])
    return name, finished[name]
