"""A whole private eyas: its own PostgreSQL and Redis, a real API (uvicorn) and real workers, all
restartable."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.core.config import Settings
from app.core.db import dispose_engines, session_scope
from app.core.security import Scope
from app.hosts import repository as hosts_repo
from app.models.base import utcnow
from app.tokens import service as tokens
from cli.local import db_upgrade
from tests.conftest import free_port, worker_env
from tests.reliability._services import EyasProcess, PrivatePostgres, PrivateRedis, start_api, wait_until

# Fast clocks so faults resolve in seconds: a job is lost 2 s after its last heartbeat, an unclaimed queued
# job is re-sent after 2 s, the reaper/reconciler runs twice a second.
FAST_CLOCKS = {
    "heartbeat_s": 0.5,
    "lost_after_heartbeats": 4,
    "redispatch_after_s": 2,
    "maintenance_interval_s": 0.5,
    "host_offline_after_s": 5,
    "cancel_grace_s": 2,
}


@dataclass
class Stack:
    pg: PrivatePostgres
    redis: PrivateRedis
    settings: Settings
    root: Path
    token: str
    api_port: int = field(default_factory=free_port)
    api: EyasProcess | None = None
    workers: dict[str, EyasProcess] = field(default_factory=dict)
    _logs: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def env(self, **extra: str) -> dict[str, str]:
        return worker_env(self.settings, **extra)

    def _log(self, name: str) -> Path:
        self._logs += 1
        return self.root / "logs" / f"{self._logs:02d}-{name}.log"

    def start_api(self) -> EyasProcess:
        self.api = start_api(self.env(EYAS_API_MAINTENANCE="true"), self.api_port, self._log("api"))
        return self.api

    def start_worker(self, host: str, **env: str) -> EyasProcess:
        started = utcnow()
        worker = EyasProcess(["worker", "--host-name", host], self.env(**env), self._log(f"worker-{host}"))
        self.workers[host] = worker

        def registered() -> bool:
            if not worker.alive():
                raise RuntimeError(f"worker {host} exited:\n{worker.log()}")
            with session_scope(self.settings) as session:
                row = hosts_repo.get(session, host)
                return row is not None and row.heartbeat_at >= started and "ready." in worker.log()

        wait_until(registered, 60, f"worker {host} registering", interval_s=0.2)
        return worker

    def close(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        if self.api is not None:
            self.api.stop()
        dispose_engines()
        self.redis.destroy()
        self.pg.destroy()


@contextmanager
def private_stack(root: Path, **overrides: object) -> Iterator[Stack]:
    """Private PostgreSQL + Redis, migrated, with an admin token; the caller starts the API and workers."""
    pg, broker = PrivatePostgres(), PrivateRedis()
    (root / "logs").mkdir(parents=True, exist_ok=True)
    stack: Stack | None = None
    try:
        pg.init()
        broker.start()
        settings = Settings(
            database_url=pg.url(),
            broker_url=broker.url,
            queue_prefix=f"r{secrets.token_hex(3)}.",
            data_dir=root / "data",
            allowed_roots=[root],
            api_maintenance=False,
            **{**FAST_CLOCKS, **overrides},  # type: ignore[arg-type]
        )
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        db_upgrade(settings)
        with session_scope(settings) as session:
            _, secret = tokens.create_token(session, name="reliability", scopes=[Scope.ADMIN])
        stack = Stack(pg, broker, settings, root, secret)
        yield stack
    finally:
        if stack is not None:
            stack.close()
        else:
            broker.destroy()
            pg.destroy()
