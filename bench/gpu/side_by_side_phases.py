"""real_model.py's phases for the reference trainers (issue 15): speculators' or SpecForge's own trainer on
the pipeline's extraction, with the pipeline's schedule, detached once the pipeline has ended; then its
draft, fix-keyed, through the same chain sweep on real SGLang as a benchmark job of the same `eyas up`.

    python3 bench/gpu/real_model.py speculators WORK OUT   # or: specforge WORK OUT
    python3 bench/gpu/real_model.py spec-sweep WORK OUT [--trainer speculators|specforge]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from journey_api import (
    ROOT,
    SIDE_BY_SIDE_CONFIGS,
    TRAIN_SETTINGS,
    client,
    detached,
    posted_pipeline,
    process_ended,
    run_sweep_job,
    train_job,
)

from app.pipelines.templates import ALL_PROMPTS, HELD_OUT_CONCURRENCY
from drafting.realmodels.demo import ANSWER_TOKENS

# trainer: (folder in WORK, its record, what its script takes of the pipeline's TRAIN_SETTINGS)
TRAINERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "speculators": ("spec", "speculators_run.json", TRAIN_SETTINGS),
    "specforge": (
        "sf",
        "specforge_run.json",  # SpecForge has no step decay or warmup ratio flag of its own here
        ("epochs", "ttt_steps", "lr", "batch_size", "max_len", "draft_vocab_size", "val_fraction", "seed"),
    ),
}


def _ended_train(args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline's train params, once the pipeline has ended: a process on the GPU fails the pipeline's
    gpu_check and the sweep's own GPU gate (run 3, docs/benchmarks.md), and alone on the GPU a reference
    trainer's tokens/s compare with eyas's."""
    work = args.work.resolve()
    http = client(work)
    began = time.monotonic()
    while (pipeline := posted_pipeline(http, work))["state"] not in ("succeeded", "failed", "cancelled"):
        if time.monotonic() - began > args.deadline_s:
            raise SystemExit(f"the pipeline has not ended (state {pipeline['state']})")
        time.sleep(3)
    train: dict[str, Any] = train_job(pipeline)["params"]
    return train


def start_trainer(args: argparse.Namespace, trainer: str) -> None:
    """The trainer's side-by-side script on the pipeline's extraction, detached (log: WORK/<folder>.log)."""
    work = args.work.resolve()
    command = trainer_command(trainer, _ended_train(args), work, eager=not args.spec_compile)
    print("starting:", " ".join(command), flush=True)
    started = detached(command, work / f"{TRAINERS[trainer][0]}.log")
    (work / f"{TRAINERS[trainer][0]}.pid").write_text(str(started.pid))  # spec-sweep waits for its exit


def trainer_command(trainer: str, train: dict[str, Any], work: Path, *, eager: bool) -> list[str]:
    folder, _, settings = TRAINERS[trainer]
    script = ROOT / "bench" / "gpu" / f"{trainer}_side_by_side.py"
    command = [sys.executable, str(script), train["data"], str(work / "smollm2"), str(work / folder)]
    command += ["--work", str(work), "--sweep-configs", SIDE_BY_SIDE_CONFIGS]
    if trainer == "speculators":
        command += ["--num-workers", "0"]  # with 8 spawned loaders run 3's trainer printed nothing in 6 min
        if eager:  # run 5: alone, its compile had not finished the first graph in 3.7 min
            command += ["--eager"]
    for key in settings:
        command += [f"--{key.replace('_', '-')}", str(train[key])]
    return command


def side_sweep(args: argparse.Namespace) -> None:
    """The trainer's draft through the sweep; OUT/<trainer>_sweep.json and a copy of the trainer's record."""
    work, out = args.work.resolve(), args.out
    out.mkdir(parents=True, exist_ok=True)
    folder, record_name, _ = TRAINERS[args.trainer]
    record = work / folder / record_name
    began = time.monotonic()
    log = work / f"{folder}.log"
    if not _trainer_done(work, folder, lambda: time.monotonic() - began > args.deadline_s):
        _bring_back(log, out)
        raise SystemExit(
            f"the {args.trainer} trainer has not ended by the deadline: OUT/{log.name} is its log"
        )
    _bring_back(log, out)
    if record.exists():
        (out / record_name).write_bytes(record.read_bytes())
    job_file = work / folder / "sweep_job.json"
    if not job_file.exists():
        raise SystemExit(f"{args.trainer} wrote no draft to sweep: see {record} and WORK/{folder}.log")
    spec, suffix = json.loads(job_file.read_text()), ""
    if args.sweep_prompts == "held-out":
        spec, suffix = on_held_out(spec, posted_pipeline(client(work), work)), "_held_out"
    job = run_sweep_job(client(work), spec, began, args.deadline_s, work / folder / f"sweep_job_id{suffix}")
    (out / f"{args.trainer}_sweep{suffix}.json").write_text(json.dumps(job, indent=2))
    print(f"{args.trainer} draft sweep {job['state']}: {json.dumps(job.get('result'))[:1500]}", flush=True)


def on_held_out(spec: dict[str, Any], pipeline: dict[str, Any]) -> dict[str, Any]:
    """`spec` (a draft's sweep on the 8 eval questions, 192 tokens past the end of turn) asked as the
    pipeline's serve_held_out step asks its drafter: the held-out conversations' prompts, every one, with the
    budget their answers were made with, ending at their end of turn, 8 at a time, no speed gate. Run 15's
    8 questions (one a category) moved by more than the trainers differ; 72 questions judge two drafts
    better, and the pipeline's own drafter has the same figure from serve_held_out."""
    held_out = pipeline["spec"].get("held_out")
    if not held_out:
        raise SystemExit("the pipeline has no held-out set: `start --held-out 72` makes one")
    conversations = held_out.get("conversations")  # given (start --carried), or generate_held_out's output
    if not conversations:
        answered = next((j for j in pipeline["jobs"] if j["pipeline_step"] == "generate_held_out"), {})
        conversations = (answered.get("result") or {}).get("conversations")
    if not conversations:
        raise SystemExit("the held-out answers are not written yet: generate_held_out has not succeeded")
    params = {
        **spec["params"],
        "prompts": conversations,
        "max_prompts": ALL_PROMPTS,
        "max_new_tokens": held_out.get("max_new_tokens") or ANSWER_TOKENS,
        "ignore_eos": False,
        "concurrency": HELD_OUT_CONCURRENCY,
        "speedup_threshold": 0.0,
    }
    return {**spec, "params": params}


def pair(args: argparse.Namespace) -> None:
    """eyas's drafter against the reference trainer's draft, paired prompt by prompt on the requests both
    asked (GET /v1/benchmarks/compare): the pipeline's sweep against `spec-sweep`'s, or with `--sweep-prompts
    held-out` its serve_held_out against `spec-sweep --sweep-prompts held-out`.
    Written to OUT/pair_<trainer>[_held_out].json."""
    work, out = args.work.resolve(), args.out
    http = client(work)
    held_out = args.sweep_prompts == "held-out"
    comparison = paired_benchmarks(http, posted_pipeline(http, work), work, args.trainer, held_out=held_out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"pair_{args.trainer}{'_held_out' if held_out else ''}.json"
    (out / name).write_text(json.dumps(comparison, indent=2))
    for config in comparison.get("configs", []):
        print(f"{config['config']}: {config['verdict']}", flush=True)
    if "configs" not in comparison:  # the API's refusal (409 NOT_COMPARABLE) says what differs
        print(f"not paired: {comparison.get('code')}: {comparison.get('detail')}", flush=True)


def paired_benchmarks(
    http: Any, pipeline: dict[str, Any], work: Path, trainer: str, *, held_out: bool
) -> dict[str, Any]:
    """The comparison (a: the pipeline's drafter, b: the trainer's draft), or the API's refusal as it came."""
    step = "serve_held_out" if held_out else "benchmark"
    ours = next((j for j in pipeline["jobs"] if j["pipeline_step"] == step), None)
    theirs = work / TRAINERS[trainer][0] / f"sweep_job_id{'_held_out' if held_out else ''}"
    if ours is None or not theirs.exists():
        raise SystemExit(f"nothing to pair: the pipeline's {step} job or {theirs} is missing")
    ids = [_benchmark_of(http, job_id) for job_id in (ours["id"], theirs.read_text().strip())]
    response = http.get("/v1/benchmarks/compare", params={"a": ids[0], "b": ids[1]})
    body: dict[str, Any] = response.json()
    return body


def _benchmark_of(http: Any, job_id: str) -> str:
    listed = http.get("/v1/benchmarks", params={"job_id": job_id}).json()["items"]
    if not listed:
        raise SystemExit(f"job {job_id} recorded no benchmark table (it has not ended, or ended before one)")
    return str(listed[0]["id"])


def _trainer_done(work: Path, folder: str, late: Callable[[], bool], grace_s: float = 5.0) -> bool:
    """Whether the detached trainer (its pid in WORK/<folder>.pid) has exited, waiting while `late()` is
    false. Its record is written before its sweep spec and before the process lets go of the GPU, and the
    sweep job's GPU gate fails a job that starts beside another process on the GPU: so the exit, not the
    record, says the sweep may start."""
    pid = int((work / f"{folder}.pid").read_text())
    while not process_ended(pid):
        if late():
            return False
        time.sleep(3)
    # The driver frees an exited process's GPU memory a moment after, and the gate does not retry.
    time.sleep(grace_s)
    return True


def _bring_back(log: Path, out: Path) -> None:
    """The trainer's log into OUT: runs 3 to 5 observed speculators' trainer live and kept none of it."""
    if log.exists():
        (out / log.name).write_bytes(log.read_bytes()[-4_000_000:])  # its tail; a call carries back 64 MiB
