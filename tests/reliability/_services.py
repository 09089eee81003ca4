"""Private PostgreSQL and Redis servers, and eyas processes pointed at them, for fault-injection tests.

The machine's own PostgreSQL (5432) and Redis (6379) are shared with other test runs, so a test that stops or
restarts a service gets its own copy on a free port. Every process here starts through `drafting.proc.spawn`
(an argv list, never a shell) and is stopped by the test that started it, on failure too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import psycopg
import redis

from drafting import proc
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path(os.environ.get("EYAS_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def wait_until(check: object, timeout_s: float, what: str, interval_s: float = 0.1) -> float:
    """Poll `check()` until it is truthy; returns the seconds it took, raises TimeoutError naming `what`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            if check():  # type: ignore[operator]
                return time.monotonic() - started
        except (OSError, httpx.TransportError, psycopg.Error, redis.RedisError):
            pass  # a service that is still starting refuses connections
        time.sleep(interval_s)
    raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s")


def _wait_dead(pid: int | None, timeout_s: float = 10.0) -> None:
    """Until `pid` has exited (a zombie counts: it holds no files or ports)."""
    deadline = time.monotonic() + timeout_s
    while pid is not None and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)


def _as_postgres(*argv: str) -> list[str]:
    # initdb and postgres refuse to run as root; the tests run as root, so drop to the postgres user.
    return ["runuser", "-u", "postgres", "--", *argv]


@dataclass
class PrivatePostgres:
    """A throwaway PostgreSQL cluster (trust auth, fsync off) that a test may stop and start at will."""

    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="eyas-pg-")))
    popen: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str = "eyas") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def init(self, database: str = "eyas") -> PrivatePostgres:
        shutil.chown(self.root, "postgres", "postgres")
        self.root.chmod(0o700)
        argv = [str(PG_BIN / "initdb"), "-D", str(self.data_dir), "-A", "trust", "-U", "postgres"]
        initdb = proc.spawn(_as_postgres(*argv), output=self.root.parent / f"{self.root.name}-initdb.log")
        if initdb.wait(timeout=120) != 0:
            raise RuntimeError("initdb failed: " + self._read(f"{self.root.name}-initdb.log"))
        self.start()
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        return self

    def start(self) -> float:
        """Start the server; returns the seconds until it accepts connections."""
        argv = [
            str(PG_BIN / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-k",
            str(self.root),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=300",
        ]
        log = self.root.parent / f"{self.root.name}.log"
        self.popen = proc.spawn(_as_postgres(*argv), output=log)
        try:  # crash recovery on a loaded 2-core machine can take a while
            return wait_until(self._answers, 120, f"PostgreSQL on port {self.port} starting")
        except TimeoutError as exc:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise TimeoutError(f"{exc}\n--- server log ---\n{tail}") from None

    def stop(self, *, crash: bool = False) -> None:
        """Fast shutdown (SIGINT: clients disconnected, clean stop), or SIGKILL of the server with `crash`."""
        if self.popen is None:
            return
        postmaster = self._postmaster_pid()
        if postmaster is not None:
            os.kill(postmaster, signal.SIGKILL if crash else signal.SIGINT)
        if crash:
            proc.terminate_group(self.popen.pid, grace_s=0, popen=self.popen)  # its backends too
        else:
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.terminate_group(self.popen.pid, grace_s=5, popen=self.popen)
        self.popen = None
        if crash:
            _wait_dead(postmaster)
            # A killed postmaster leaves its lock files; the next start would refuse while the old pid
            # still shows (a zombie nobody reaped on a loaded machine counts as alive to kill(pid, 0)).
            (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
            (self.root / f".s.PGSQL.{self.port}.lock").unlink(missing_ok=True)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        for name in (f"{self.root.name}.log", f"{self.root.name}-initdb.log"):
            (self.root.parent / name).unlink(missing_ok=True)

    def _answers(self) -> bool:
        with psycopg.connect(self.admin_url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True

    def _postmaster_pid(self) -> int | None:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            return int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _read(self, name: str) -> str:
        path = self.root.parent / name
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class PrivateRedis:
    """A throwaway Redis without persistence: a restart loses every message it held, as a crash would."""

    port: int = field(default_factory=free_port)
    log: Path = field(default_factory=lambda: Path(tempfile.mkstemp(prefix="eyas-redis-", suffix=".log")[1]))
    popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> float:
        argv = ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        self.popen = proc.spawn([*argv, "--bind", "127.0.0.1"], output=self.log)
        return wait_until(self._answers, 30, f"Redis on port {self.port} starting", interval_s=0.05)

    def stop(self) -> None:
        if self.popen is not None:
            proc.terminate_group(self.popen.pid, grace_s=5, popen=self.popen)
            self.popen = None

    def destroy(self) -> None:
        self.stop()
        self.log.unlink(missing_ok=True)

    def _answers(self) -> bool:
        return bool(redis.Redis.from_url(self.url, socket_timeout=1).ping())


class EyasProcess:
    """`eyas api` or `eyas worker` as a real process with the given environment."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv, self.env, self.log_path = argv, env, log
        self.popen = proc.spawn([sys.executable, "-m", "cli.main", *argv], env=env, cwd=ROOT, output=log)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.alive():
            proc.terminate_group(self.popen.pid, grace_s=10, popen=self.popen)

    def kill9(self) -> None:
        """SIGKILL the process itself (not the job process groups it started: those outlive it)."""
        if self.alive():
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


def start_api(env: dict[str, str], port: int, log: Path) -> EyasProcess:
    api = EyasProcess(["api", "--port", str(port)], env, log)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if not api.alive():
            raise RuntimeError(f"the API exited:\n{api.log()}")
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200

    wait_until(healthy, 60, f"the API on port {port} answering")
    return api
