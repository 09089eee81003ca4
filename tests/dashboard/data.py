"""Rows the dashboard reads, written through the app's own services and models.

Jobs of kinds that cannot run here (train, benchmark: no GPU, no model) are inserted as the rows their
workers would leave; a host with GPUs is recorded with the heartbeat its worker would send (this machine has
no NVIDIA GPU for NVML to report). Everything is then read back by the browser through the real API.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import torch

from app.benchmarks import service as benchmarks
from app.core.config import Settings
from app.core.db import session_scope
from app.hosts import service as hosts
from app.jobs.lifecycle import record_metrics
from app.logs.repository import insert_lines
from app.models.job import Job, JobEvent
from app.models.pipeline import Pipeline
from app.servers import service as servers
from contract.params.benchmark import SpecConfig
from drafting.ml.objective import summarise
from drafting.serving.benchmark.speedup_stats import speedup_interval
from drafting.serving.benchmark.sweep_gate import release_gate

H200_MIB = 143771.0


def _state_path(state: str) -> list[str]:
    """The states a job passed through to reach `state`."""
    if state in ("pending", "queued"):
        return [state]
    ran = ["queued", "starting", "running"]
    return ran if state == "running" else [*ran, state]


def make_job(settings: Settings, kind: str, state: str, **fields: Any) -> str:
    """A job row in `state`, with the events that led there."""
    now = datetime.now(UTC)
    job_id = uuid.uuid4()
    started = now - timedelta(minutes=fields.pop("minutes_ago", 3))
    ran = state not in ("pending", "queued")
    ended = state in ("succeeded", "failed", "cancelled")
    job = Job(
        id=job_id,
        kind=kind,
        params=fields.pop("params", {}),
        state=state,
        host=fields.pop("host", "gpu-h200"),
        gpus_requested=len(fields.get("gpu_indices") or []),
        created_at=started - timedelta(seconds=4),
        queued_at=started - timedelta(seconds=4),
        started_at=started - timedelta(seconds=1) if ran else None,
        running_at=started if ran else None,
        finished_at=fields.pop("finished_at", now) if ended else None,
        updated_at=now,
        attempt=1 if ran else 0,
        worker="worker@gpu-h200" if ran else None,
        **fields,
    )
    with session_scope(settings) as session:
        session.add(job)
        session.flush()
        previous = None
        for i, to_state in enumerate(_state_path(state)):
            at = job.created_at + timedelta(seconds=2 * i)
            session.add(JobEvent(job_id=job_id, from_state=previous, to_state=to_state, at=at))
            previous = to_state
    return str(job_id)


def add_log(
    settings: Settings, job_id: str, texts: list[str], stream: str = "stdout", first_seq: int = 1
) -> None:
    now = datetime.now(UTC)
    rows = [(first_seq + i, now, stream, text) for i, text in enumerate(texts)]
    with session_scope(settings) as session:
        insert_lines(session, uuid.UUID(job_id), rows)


def add_metrics(settings: Settings, job_id: str, rows: list[tuple[str, int, float]]) -> None:
    with session_scope(settings) as session:
        record_metrics(session, job_id=uuid.UUID(job_id), rows=rows)


def h200(index: int, used_mib: float, util: float, processes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000",
        "name": "NVIDIA H200",
        "memory_used_mib": used_mib,
        "memory_total_mib": H200_MIB,
        "utilization_pct": util,
        "power_w": 110.0 + 5.6 * util,
        "temperature_c": 31.0 + 0.4 * util,
        "processes": processes,
    }


def report_gpu_host(
    settings: Settings, name: str, gpus: list[dict[str, Any]], allowed_roots: tuple[str, ...] = ("/data",)
) -> None:
    shm = {
        "path": "/dev/shm",
        "total_mib": 65536.0,
        "free_mib": 61000.0,
        "segments": [],
        "stale_count": 0,
        "stale_mib": 0.0,
    }
    with session_scope(settings) as session:
        hosts.record_heartbeat(
            session,
            name=name,
            worker=f"worker@{name}",
            gpus=gpus,
            gpu_error=None,
            shm=shm,
            allowed_roots=list(allowed_roots),
        )


def lease_gpus(settings: Settings, host: str, count: int, job_id: str) -> list[int]:
    with session_scope(settings) as session:
        indices = hosts.try_acquire_gpus(session, host=host, count=count, job_id=uuid.UUID(job_id))
    assert indices is not None, "the GPUs were not free"
    return indices


def sweep_rows(lossy: bool = False) -> list[dict[str, Any]]:
    """A config sweep as drafting/serving/benchmark/sweep_report.py tabulates it: the baseline, then each
    config (a tree beside the chain of the same steps), speedups with their 95 % interval, divergences judged
    (lossy: 16,1,17 with a real loss)."""
    base_speed = 182.0
    measured = [
        # config, accept len, tok/s, ttft, itl, speedup half-width, near-ties, real losses
        (None, None, base_speed, 21.0, 5.4, None, 0, 0),
        ("5,1,6", 3.1, 402.0, 24.5, 2.4, 0.21, 2, 0),
        ("5,2,8", 3.3, 389.0, 25.0, 2.5, 0.30, 3, 0),
        ("10,1,11", 3.6, 431.0, 26.0, 2.3, 0.12, 1, 0),
        ("16,1,17", 3.7, 398.0, 29.0, 2.5, 0.40, 0, int(lossy)),
    ]
    rows = []
    for config, accept, speed, ttft, itl, half, ties, losses in measured:
        steps, topk, draft_tokens = (int(p) for p in config.split(",")) if config else (None, None, None)
        speedup = round(speed / base_speed, 4)
        compared = 16
        rows.append(
            {
                "config": config,
                "label": "baseline (no speculation)" if config is None else config,
                "depth": steps,
                "steps": steps,
                "topk": topk,
                "draft_tokens": draft_tokens,
                "accept_len": accept,
                "output_tok_s": speed,
                "speedup": speedup,
                "speedup_ci_low": None if half is None else round(speedup - half, 4),
                "speedup_ci_high": None if half is None else round(speedup + half, 4),
                "ttft_p50_ms": ttft,
                "ttft_p99_ms": ttft * 2.1,
                "itl_p50_ms": itl,
                "itl_p99_ms": itl * 1.8,
                "outputs_match": None if config is None else losses == 0,
                "outputs_identical": None if config is None else ties + losses == 0,
                "divergences": None
                if config is None
                else {
                    "identical": compared - ties - losses,
                    "near_tie": ties,
                    "real_loss": losses,
                    "unscored": 0,
                },
                "divergence_details": [
                    {"request": 3, "position": 17, "verdict": "real_loss", "margin": 6.1, "bound": 0.5}
                ]
                if losses
                else [],
                "failed_requests": 0,
            }
        )
    return rows


def sweep_result(deployable: bool = True) -> dict[str, Any]:
    rows = sweep_rows(lossy=not deployable)
    reasons = [] if deployable else ["16,1,17: 1 real loss(es): outputs the target would not produce"]
    gate = {
        "deployable": deployable,
        "chosen_config": "10,1,11",
        "chosen_depth": 10,
        "speedup": rows[3]["speedup"],
        "threshold": 1.0,
        "reasons": reasons,
    }
    return {"mode": "sweep", "rows": rows, "gate": gate}


def record_benchmark(settings: Settings, job_id: str, summary: dict[str, Any]) -> None:
    with session_scope(settings) as session:
        benchmarks.record_benchmark(session, job_id=uuid.UUID(job_id), summary=summary)


def record_server(settings: Settings, job_id: str, host: str, **event: Any) -> str:
    """The server row a launch job's `server` events leave."""
    with session_scope(settings) as session:
        server = servers.record_server_event(session, job_id=uuid.UUID(job_id), host=host, event=event)
        return str(server.id)


def make_pipeline(settings: Settings, steps: list[tuple[str, str, dict[str, Any]]]) -> tuple[str, list[str]]:
    """A pipeline row and its step jobs (oldest first), each as (kind, state, extra job fields); a job's step
    is its kind unless the extra fields name one (`pipeline_step`)."""
    pipeline_id = uuid.uuid4()
    with session_scope(settings) as session:
        session.add(Pipeline(id=pipeline_id, template="eagle3", spec={}, host="gpu-h200", retries=0))
    job_ids = []
    for i, (kind, state, extra) in enumerate(steps):
        minutes_ago = extra.pop("minutes_ago", 60 - 5 * i)
        step = extra.pop("pipeline_step", kind)
        job_ids.append(
            make_job(
                settings,
                kind,
                state,
                pipeline_id=pipeline_id,
                pipeline_step=step,
                minutes_ago=minutes_ago,
                **extra,
            )
        )
    return str(pipeline_id), job_ids


def cpu_demo_sweep() -> dict[str, Any]:
    """The CPU demo's sweep as the benchmark stage leaves it: one chain depth, the reference engine slower
    than plain decoding, a threshold of 0; its speedup interval and gate computed by the stage's own code."""
    rounds = [0.55, 0.71, 0.66]  # per-round speculative tok/s over the paired baseline batch's
    interval = speedup_interval(rounds)
    base_speed = 21.4
    latency = {"ttft_p50_ms": 180.0, "ttft_p99_ms": 410.0, "itl_p50_ms": 46.0, "itl_p99_ms": 88.0}
    baseline = {**sweep_rows()[0], "output_tok_s": base_speed, **latency}
    chain = {
        **sweep_rows()[1],
        "config": "3,1,4",
        "label": "3,1,4",
        "depth": 3,
        "steps": 3,
        "draft_tokens": 4,
        "accept_len": 1.13,
        "output_tok_s": round(base_speed * interval.mean, 1),
        "speedup": round(interval.mean, 4),
        "speedup_n": interval.n,
        "speedup_ci_low": round(interval.low, 4),
        "speedup_ci_high": round(interval.high, 4),
        "ttft_p50_ms": 310.0,
        "ttft_p99_ms": 620.0,
        "itl_p50_ms": 74.0,
        "itl_p99_ms": 131.0,
        "divergences": {"identical": 8, "near_tie": 0, "real_loss": 0, "unscored": 0},
        "outputs_identical": True,
    }
    rows = [baseline, chain]
    return {"mode": "sweep", "rows": rows, "gate": release_gate(rows, SpecConfig.chain(3), 0.0)}


def trainer_metrics(
    epochs: int = 3, steps_per_epoch: int = 40, ttt_steps: int = 7
) -> list[tuple[str, int, float]]:
    """What the train stage reports for a run with a split and a held-out validation set: every name comes
    from the trainer's own summarise (drafting/ml/objective.py), per window (train/), per epoch (train_epoch/,
    val/, held_out/ with simulated accept lengths), plus lr, grad norm, tokens/s and epoch."""
    names = list(summarise(torch.ones(5, ttt_steps), [1.0] * ttt_steps))
    rows: list[tuple[str, int, float]] = []

    def values(prefix: str, step: int, quality: float) -> None:
        learnt = 1 - math.exp(-step / 45)
        for name in names:
            position = int(name.rsplit("_", 1)[1]) if name[-1].isdigit() and "_d" not in name else 0
            depth = int(name.rsplit("_d", 1)[1]) if "_d" in name else ttt_steps
            if name.startswith("loss"):
                value = ((6.0 + 0.3 * position) * math.exp(-step / 60) + 1.2 + 0.1 * position) * (2 - quality)
            elif "acc" in name and "accept" not in name:
                value = quality * (0.78 - 0.07 * position) * learnt
            else:
                value = 1.0 + quality * (1 - 0.8**depth) * 3.6 * learnt
            rows.append((f"{prefix}/{name}", step, value))

    for step in range(0, epochs * steps_per_epoch, 5):
        values("train", step, 1.0)
        rows.append(("train/lr", step, 1e-3 * min(1.0, (step + 1) / 20)))
        rows.append(("train/grad_norm", step, 2.5 * math.exp(-step / 50) + 0.4))
        rows.append(("train/tokens_per_s", step, 41_000 + 900 * math.sin(step / 7)))
    for epoch in range(1, epochs + 1):
        step = epoch * steps_per_epoch
        rows.append(("epoch", step, float(epoch)))
        for prefix, quality in (("train_epoch", 1.0), ("val", 0.93), ("held_out", 0.81)):
            values(prefix, step, quality)
        for prefix, quality in (("val", 0.9), ("held_out", 0.78)):
            learnt = 1 - math.exp(-step / 45)
            for depth in (3, 5, 7):
                simulated = 1.0 + quality * (1 - 0.8**depth) * 3.0 * learnt
                rows.append((f"{prefix}/sim_accept_len_d{depth}", step, simulated))
            rows.append(
                (f"{prefix}/sim_accept_len", step, 1.0 + quality * (1 - 0.8**ttt_steps) * 3.0 * learnt)
            )
    return rows
