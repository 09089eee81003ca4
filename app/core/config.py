"""The one Settings object. Nothing else in eyas reads the environment."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

CHILD_ENV_PASSTHROUGH = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "TZ",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "CUDA_HOME",
        "HF_HOME",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "VIRTUAL_ENV",
        "OPENBLAS_CORETYPE",
        "OPENBLAS_L2_SIZE",
    }
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EYAS_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(Path(".eyas"), description="embedded mode: SQLite files, logs, admin token")
    database_url: str | None = Field(
        None, description="postgresql+psycopg://… in production; unset = SQLite in data_dir"
    )
    broker_url: str | None = Field(
        None, description="redis://… in production; unset = SQLite broker in data_dir"
    )
    redis_url: str | None = Field(
        None, description="Redis for log follow pub/sub (defaults to broker_url when that is redis)"
    )
    queue_prefix: str = Field("", description="prefix of Celery queue names (isolates test runs)")

    heartbeat_s: float = Field(2.0, gt=0, description="worker heartbeat period for jobs and hosts")
    lost_after_heartbeats: float = Field(
        2.0, gt=1, description="a job is WORKER_LOST after this many periods"
    )
    host_offline_after_s: float = Field(
        15.0, gt=0, description="a host without heartbeat is offline after this"
    )
    redispatch_after_s: float = Field(10.0, gt=0, description="re-send queued jobs not claimed after this")
    maintenance_interval_s: float = Field(1.0, gt=0, description="reaper/reconciler period")
    task_expires_s: int = Field(
        24 * 3600, gt=0, description="Celery message expiry (the DB stays the record)"
    )
    cancel_grace_s: float = Field(10.0, ge=0, description="SIGTERM → SIGKILL grace on cancel and timeout")

    worker_host_name: str | None = Field(None, description="name of this worker's host (queue host.<name>)")
    worker_concurrency: int = Field(4, ge=1, le=64, description="jobs a worker runs at once")
    allowed_roots: list[Path] = Field(
        default_factory=list, description="paths in params must lie under these on the worker host"
    )
    allow_remote_code: bool = Field(
        False,
        description="on a worker host: a job with trust_remote_code may run a target folder's own Python "
        "code (config.json auto_map); it executes files from that folder. Off: such jobs fail "
        "REMOTE_CODE_NOT_ALLOWED",
    )
    log_dir: Path | None = Field(
        None, description="per-job log files on the worker host (default data_dir/logs)"
    )

    max_body_bytes: int = Field(1024 * 1024, gt=0, description="largest request body accepted")
    max_log_bytes_per_job: int = Field(256 * 1024 * 1024, gt=0, description="oldest lines dropped past this")
    log_retention_days: float = Field(
        30.0, gt=0, description="log lines of jobs ended longer ago are deleted"
    )
    log_batch_interval_s: float = Field(0.1, gt=0, description="ship log batches at least this often")
    log_batch_bytes: int = Field(64 * 1024, gt=0, description="ship a log batch once it reaches this size")
    log_buffer_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="worker-side log buffer before dropping"
    )
    auth_failures_per_minute: int = Field(30, gt=0, description="failed authentications allowed per client")
    auth_cache_s: float = Field(
        5.0,
        ge=0,
        le=60,
        description="an API process reuses a token's principal this long without reading its row (0: never); "
        "a token revoked through another API process may keep working here that long, the revoking "
        "process forgets it at once",
    )

    api_maintenance: bool = Field(True, description="run the reaper/reconciler inside the API process too")

    url: str = Field("http://127.0.0.1:8000", description="CLI: eyas API URL")
    token: str | None = Field(None, description="CLI: bearer token")

    @field_validator("queue_prefix")
    @classmethod
    def _simple_prefix(cls, value: str) -> str:
        if value and not value.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError("queue_prefix may hold letters, digits, '-', '_' and '.' only")
        return value

    @property
    def embedded(self) -> bool:
        return self.database_url is None

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'eyas.sqlite').resolve()}"

    def resolved_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{(self.data_dir / 'broker.sqlite').resolve()}"

    def resolved_redis_url(self) -> str | None:
        if self.redis_url:
            return self.redis_url
        if self.broker_url and self.broker_url.startswith("redis"):
            return self.broker_url
        return None

    def resolved_log_dir(self) -> Path:
        return self.log_dir or self.data_dir / "logs"

    def child_env(self) -> dict[str, str]:
        """The environment a job's process starts with: an allow-list of the worker's own variables."""
        return {k: v for k, v in os.environ.items() if k in CHILD_ENV_PASSTHROUGH or k.startswith("NCCL_")}

    def service_env(self, **overrides: str) -> dict[str, str]:
        """Environment for eyas's own processes (`eyas up` starting its worker): all, plus overrides."""
        env = dict(os.environ)
        env.update(overrides)
        return env

    @property
    def lost_after_s(self) -> float:
        return self.heartbeat_s * self.lost_after_heartbeats


@lru_cache
def get_settings() -> Settings:
    return Settings()
