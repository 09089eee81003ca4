"""Shared set-up for the control-plane benchmarks: a fresh PostgreSQL database, Redis, and real eyas
processes (API via uvicorn, workers) started through the project's process runner."""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg

from app.core.config import Settings
from app.core.db import session_scope
from app.core.security import Scope
from app.hosts import service as hosts
from app.tokens import service as tokens
from cli.local import db_upgrade
from drafting import proc
from drafting.serving.benchmark.bench_stats import percentile
from drafting.serving.launch.host_checks import free_port

ROOT = Path(__file__).resolve().parents[1]

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


def summary_ms(values_s: list[float]) -> dict[str, float]:
    """n, p50, p99 and mean in milliseconds (percentiles as the serving benchmarks compute them)."""
    ms = [v * 1000 for v in values_s]
    return {
        "n": len(ms),
        "p50_ms": _rounded(percentile(ms, 50)),
        "p99_ms": _rounded(percentile(ms, 99)),
        "mean_ms": round(statistics.fmean(ms), 2) if ms else float("nan"),
    }


def _rounded(value: float | None) -> float:
    return round(value, 2) if value is not None else float("nan")


@contextmanager
def database() -> Iterator[str]:
    name = f"eyas_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_settings(db_url: str, data_dir: Path, **overrides: object) -> Settings:
    settings = Settings(
        database_url=db_url,
        broker_url=REDIS,
        queue_prefix=f"b{secrets.token_hex(3)}.",
        data_dir=data_dir,
        allowed_roots=[data_dir],
        api_maintenance=True,
        **overrides,
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    db_upgrade(settings)
    return settings


def admin_token(settings: Settings) -> str:
    with session_scope(settings) as session:
        _, secret = tokens.create_token(session, name="bench", scopes=[Scope.ADMIN])
    return secret


def env_for(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EYAS_")}
    for name, value in settings.model_dump(mode="json").items():
        if value is None:
            continue
        env[f"EYAS_{name.upper()}"] = json.dumps(value) if isinstance(value, list | dict) else str(value)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextmanager
def service(
    argv: list[str],
    settings: Settings,
    log: Path,
    ready_url: str | None = None,
    ready_text: str | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    popen = proc.spawn([sys.executable, *argv], env=env_for(settings), cwd=ROOT, output=log)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ready_url and _answers(ready_url):
                break
            if ready_text and log.exists() and ready_text in log.read_text(errors="replace"):
                break
            if popen.poll() is not None:
                raise RuntimeError(log.read_text())
            time.sleep(0.2)
        else:
            raise TimeoutError(log.read_text())
        yield popen
    finally:
        proc.terminate_group(popen.pid, grace_s=10, popen=popen)


@dataclass(frozen=True)
class Eyas:
    """A running eyas: the API's URL, an admin's headers, and the processes (to read their CPU and memory)."""

    url: str
    headers: dict[str, str]
    api: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes] | None


@contextmanager
def eyas(settings: Settings, folder: Path, *, worker_host: str | None = None) -> Iterator[Eyas]:
    """`eyas api` on a free port, ready once /healthz answers, and with worker_host an `eyas worker` for that
    host, ready once it logs "ready." and its host has registered (a job for an unregistered host is
    refused); their logs are folder/api.log and folder/worker.log."""
    headers = {"Authorization": f"Bearer {admin_token(settings)}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with ExitStack() as stack:
        api = stack.enter_context(
            service(
                ["-m", "cli.main", "api", "--port", str(port)],
                settings,
                folder / "api.log",
                ready_url=f"{url}/healthz",
            )
        )
        worker = None
        if worker_host is not None:
            worker = stack.enter_context(
                service(
                    ["-m", "cli.main", "worker", "--host-name", worker_host],
                    settings,
                    folder / "worker.log",
                    ready_text="ready.",
                )
            )
            registered(url, headers, worker_host)
        yield Eyas(url, headers, api, worker)


def registered(url: str, headers: dict[str, str], host: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{url}/v1/hosts/{host}", headers=headers).status_code != 200:
        if time.monotonic() > deadline:
            raise TimeoutError(f"host {host} did not register within {timeout_s} s")
        time.sleep(0.1)


def register_idle_host(settings: Settings, host: str) -> None:
    """A host registered as its worker would be, with no worker running: its jobs stay queued."""
    with session_scope(settings) as session:
        hosts.record_heartbeat(
            session,
            name=host,
            worker="bench",
            gpus=[],
            gpu_error="no worker runs",
            shm=None,
            allowed_roots=[],
        )


@contextmanager
def bare_endpoint(settings: Settings, folder: Path) -> Iterator[str]:
    """The yardstick: a bare FastAPI app returning constant JSON at /job, on eyas api's uvicorn settings."""
    port = free_port()
    argv = ["-m", "uvicorn", "bench._bare_app:app", "--port", str(port), "--log-level", "info"]
    argv += ["--no-access-log", "--http", "h11"]  # eyas api serves with h11 (a header-size limit)
    url = f"http://127.0.0.1:{port}/job"
    with service(argv, settings, folder / "bare.log", ready_url=url):
        yield url


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code < 500
    except httpx.TransportError:
        return False
