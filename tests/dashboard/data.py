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

from app.benchmarks import service as benchmarks
from app.core.config import Settings
from app.core.db import session_scope
from app.hosts import service as hosts
from app.jobs.lifecycle import record_metrics
from app.logs.repository import insert_lines
from app.models.job import Job, JobEvent
from app.models.pipeline import Pipeline
from app.servers import service as servers

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


def training_curves(steps: range, positions: int = 3) -> list[tuple[str, int, float]]:
    """Loss falling and accuracy rising per TTT position, as the train stage reports them."""
    rows: list[tuple[str, int, float]] = []
    for step in steps:
        loss = 6.0 * math.exp(-step / 60) + 1.2 + 0.08 * math.sin(step / 3)
        rows.append(("train/loss", step, loss))
        rows.append(("lr", step, 3e-4 * min(1.0, (step + 1) / 20)))
        rows.append(("tokens_per_s", step, 41_000 + 900 * math.sin(step / 7)))
        rows.append(("est_accept_len", step, 1.0 + 2.6 * (1 - math.exp(-step / 50))))
        for k in range(positions):
            rows.append((f"train/acc_{k}", step, (0.75 - 0.1 * k) * (1 - math.exp(-step / 50))))
        if step % 25 == 24:
            rows.append(("val/loss", step, loss + 0.15))
            rows.append(("val/est_accept_len_d5", step, 1.0 + 2.4 * (1 - math.exp(-step / 50))))
            rows.append(("held_out/est_accept_len_d5", step, 1.0 + 1.1 * (1 - math.exp(-step / 50))))
            for k in range(positions):
                rows.append((f"val/acc_{k}", step, (0.72 - 0.1 * k) * (1 - math.exp(-step / 50))))
    return rows


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


def report_gpu_host(settings: Settings, name: str, gpus: list[dict[str, Any]]) -> None:
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
            allowed_roots=["/data"],
        )


def lease_gpus(settings: Settings, host: str, count: int, job_id: str) -> list[int]:
    with session_scope(settings) as session:
        indices = hosts.try_acquire_gpus(session, host=host, count=count, job_id=uuid.UUID(job_id))
    assert indices is not None, "the GPUs were not free"
    return indices


def sweep_rows(lossy: bool = False) -> list[dict[str, Any]]:
    """A config sweep as drafting/serving/sweep_report.py tabulates it: the baseline, then each config (a
    tree beside the chain of the same steps), speedups with their 95 % interval, divergences judged (lossy:
    16,1,17 with a real loss)."""
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
