"""Shared fixtures: a real PostgreSQL database and real Redis for the run, real worker processes.

Every test run gets its own PostgreSQL database (created, migrated with Alembic, dropped) and its own queue
prefix on Redis, so runs never see each other's rows or messages.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg.errors import DeadlockDetected
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.core.config import Settings
from app.core.db import dispose_engines, session_scope
from app.core.security import Scope
from app.main import create_app
from app.tokens import service as tokens
from cli.local import db_upgrade
from drafting import proc
from drafting.serving.launch.host_checks import free_port

PG_ADMIN_URL = os.environ.get("EYAS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("EYAS_TEST_REDIS", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).resolve().parents[1]
TABLES = (
    "pipeline",
    "log_line",
    "job_metric",
    "job_event",
    "job_dependency",
    "idempotency_key",
    "gpu_lease",
    "artifact",
    "benchmark_result",
    "server",
    "job",
    "host",
    "api_token",
)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    name = f"eyas_test_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    yield f"{base}/{name}"
    dispose_engines()
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def work_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("eyas")


@pytest.fixture(scope="session")
def base_settings(pg_url: str, work_root: Path) -> Settings:
    settings = Settings(
        database_url=pg_url,
        broker_url=REDIS_URL,
        queue_prefix=f"t{secrets.token_hex(3)}.",
        data_dir=work_root / "data",
        heartbeat_s=0.5,
        lost_after_heartbeats=3,
        host_offline_after_s=5,
        redispatch_after_s=3,
        maintenance_interval_s=0.5,
        cancel_grace_s=2,
        allowed_roots=[work_root],
        api_maintenance=False,
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db_upgrade(settings)
    return settings


@pytest.fixture
def settings(base_settings: Settings) -> Settings:
    """The run's settings, with every table emptied before the test."""
    _truncate_all(base_settings)
    return base_settings


def _truncate_all(settings: Settings, attempts: int = 5) -> None:
    """TRUNCATE locks its tables one after another; a live server of the last test (the dashboard's, still
    polling) reading two of them in the other order is a deadlock PostgreSQL settles by aborting one side.
    When that side is the TRUNCATE, it is simply tried again."""
    for attempt in range(attempts):
        try:
            with session_scope(settings) as session:
                session.execute(text(f"TRUNCATE {', '.join(TABLES)} CASCADE"))
            return
        except OperationalError as exc:
            if not isinstance(exc.orig, DeadlockDetected) or attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


def make_token(settings: Settings, *scopes: Scope, name: str = "test") -> str:
    with session_scope(settings) as session:
        _, secret = tokens.create_token(session, name=name, scopes=list(scopes))
    return secret


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def admin(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token(settings, Scope.ADMIN)}"}


@pytest.fixture
def reader(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token(settings, Scope.READ, name='reader')}"}


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EYAS_")}
    env.update(
        {
            "EYAS_DATABASE_URL": settings.resolved_database_url(),
            "EYAS_BROKER_URL": settings.resolved_broker_url(),
            "EYAS_QUEUE_PREFIX": settings.queue_prefix,
            "EYAS_DATA_DIR": str(settings.data_dir),
            "EYAS_HEARTBEAT_S": str(settings.heartbeat_s),
            "EYAS_LOST_AFTER_HEARTBEATS": str(settings.lost_after_heartbeats),
            "EYAS_REDISPATCH_AFTER_S": str(settings.redispatch_after_s),
            "EYAS_MAINTENANCE_INTERVAL_S": str(settings.maintenance_interval_s),
            "EYAS_CANCEL_GRACE_S": str(settings.cancel_grace_s),
            "EYAS_ALLOWED_ROOTS": json.dumps([str(r) for r in settings.allowed_roots]),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


class WorkerProcess:
    """A real `eyas worker` process for one host."""

    def __init__(
        self, settings: Settings, host: str, log_path: Path, args: Sequence[str] = (), **env: str
    ) -> None:
        self.settings, self.host, self.log_path = settings, host, log_path
        self.popen = proc.spawn(
            [sys.executable, "-m", "cli.main", "worker", "--host-name", host, *args],
            env=worker_env(settings, **env),
            cwd=ROOT,
            output=log_path,
        )

    def wait_registered(self, timeout_s: float = 30.0) -> None:
        from app.hosts import repository as hosts_repo
        from app.models.base import utcnow

        started = utcnow()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with session_scope(self.settings) as session:
                host = hosts_repo.get(session, self.host)
                if host is not None and host.heartbeat_at >= started and "ready." in self.log():
                    return
            if self.popen.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log()}")
            time.sleep(0.2)
        raise TimeoutError(f"worker {self.host} did not register:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        proc.terminate_group(self.popen.pid, grace_s=10, popen=self.popen)

    def kill9(self) -> None:
        import signal

        os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


@pytest.fixture
def start_worker(settings: Settings, tmp_path: Path) -> Iterator[object]:
    started: list[WorkerProcess] = []

    def _start(host: str = "gpu-a", args: Sequence[str] = (), **env: str) -> WorkerProcess:
        worker = WorkerProcess(settings, host, tmp_path / f"worker-{host}-{len(started)}.log", args, **env)
        started.append(worker)
        worker.wait_registered()
        return worker

    yield _start
    for worker in started:
        if worker.popen.poll() is None:
            worker.stop()


@contextmanager
def serving(argv: list[str], env: dict[str, str], log: Path) -> Iterator[str]:
    """Run an HTTP server process (argv ends with --port P) until the block ends; yields its URL."""
    import httpx

    port = argv[argv.index("--port") + 1]
    popen = proc.spawn(argv, env=env, cwd=ROOT, output=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        proc.terminate_group(popen.pid, grace_s=5, popen=popen)
        raise TimeoutError(log.read_text())
    try:
        yield url
    finally:
        proc.terminate_group(popen.pid, grace_s=5, popen=popen)


@pytest.fixture
def api_server(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """A real `eyas api` (uvicorn) process on a free port, for streaming and CLI tests."""
    argv = [sys.executable, "-m", "cli.main", "api", "--port", str(free_port())]
    with serving(argv, worker_env(settings, EYAS_API_MAINTENANCE="true"), tmp_path / "api.log") as url:
        yield url
