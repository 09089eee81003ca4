"""Commands that run eyas itself: up (embedded), api, worker, db upgrade, token management on the database."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from subprocess import Popen
from typing import Annotated

import psutil
import typer

from app.core.config import Settings, get_settings
from app.core.db import session_scope
from app.core.security import Scope

MAX_HEADER_BYTES = 64 * 1024
HOST_NAME_HELP = "name of this GPU host; the worker consumes queue host.<name>"


def db_upgrade(settings: Settings) -> None:
    """Migrate the database to the newest schema (same as `alembic upgrade head`)."""
    from alembic import command
    from alembic.config import Config

    root = Path(__file__).resolve().parents[1]
    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "migrations"))
    config.attributes["url"] = settings.resolved_database_url()
    command.upgrade(config, "head")


def ensure_admin_token(settings: Settings) -> str:
    """The embedded default's admin token: created once, kept in <data-dir>/admin.token (mode 600)."""
    from app.tokens import service as tokens

    path = settings.data_dir / "admin.token"
    if path.exists():
        secret = path.read_text().strip()
        with session_scope(settings) as session:
            if tokens.authenticate(session, secret) is not None:
                return secret
    with session_scope(settings) as session:
        _, secret = tokens.create_token(session, name="admin (eyas up)", scopes=[Scope.ADMIN])
    path.write_text(secret + "\n")
    path.chmod(0o600)
    return secret


def run_api(settings: Settings, *, host: str, port: int) -> None:
    import uvicorn

    from app.main import create_app

    # h11 rather than httptools: httptools reads header blocks of any size (50 MB seen in tests/reliability).
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level="info",
        access_log=False,
        http="h11",
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )


def up(
    port: Annotated[int, typer.Option(help="API port")] = 8000,
    host: Annotated[str, typer.Option(help="address the API binds")] = "127.0.0.1",
    data_dir: Annotated[Path, typer.Option(help="SQLite database, broker, logs, admin token")] = Path(
        ".eyas"
    ),
    host_name: Annotated[str, typer.Option(help=HOST_NAME_HELP)] = "local",
    allow_root: Annotated[
        list[Path] | None, typer.Option(help="paths jobs may use (repeat); default: cwd and data dir")
    ] = None,
) -> None:
    """Start eyas on the embedded default: API + one local worker, SQLite database and broker in DATA_DIR."""
    from drafting import proc

    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    roots = [p.resolve() for p in (allow_root or [Path.cwd(), data_dir])]
    overrides = {"EYAS_DATA_DIR": str(data_dir), "EYAS_ALLOWED_ROOTS": json.dumps([str(r) for r in roots])}
    settings = Settings(data_dir=data_dir, allowed_roots=roots, database_url=None, broker_url=None)
    db_upgrade(settings)
    token = ensure_admin_token(settings)
    worker = proc.spawn(
        [
            sys.executable,
            "-m",
            "cli.main",
            "worker",
            "--host-name",
            host_name,
            "--exit-with-pid",
            str(os.getpid()),
        ],
        env=settings.service_env(**overrides),
        cwd=Path(__file__).resolve().parents[1],
        output=data_dir / "worker.log",
    )
    _wait_for_host(settings, host_name, worker, data_dir / "worker.log")
    url = f"http://{host}:{port}"
    typer.echo(f"eyas is up (embedded: SQLite in {data_dir})\n  API:   {url}  (OpenAPI: {url}/openapi.json)")
    typer.echo(
        f"  token: {token}\n  (also in {data_dir / 'admin.token'}; worker log: {data_dir / 'worker.log'})"
    )
    listed = ", ".join(str(r) for r in roots)
    typer.echo(f"  roots: {listed}  (job paths must lie under these; --allow-root sets them)")
    typer.echo(f"  try:   curl -H 'Authorization: Bearer {token}' {url}/v1/hosts")
    try:
        run_api(settings, host=host, port=port)
    finally:
        proc.terminate_group(worker.pid, grace_s=10, popen=worker)


def _wait_for_host(
    settings: Settings, name: str, worker: Popen[bytes], log: Path, timeout_s: float = 90
) -> None:
    """Jobs placed right after `eyas up` need the local host registered, so wait for its first heartbeat."""
    from app.hosts import repository as hosts

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            typer.echo(f"the worker exited ({worker.returncode}); see {log}", err=True)
            raise typer.Exit(1)
        with session_scope(settings) as session:
            if hosts.get(session, name) is not None:
                return
        time.sleep(0.2)
    typer.echo(f"the worker did not register within {timeout_s:.0f} s; see {log}", err=True)


def api(
    port: Annotated[int, typer.Option(help="API port")] = 8000,
    host: Annotated[str, typer.Option(help="address the API binds")] = "127.0.0.1",
) -> None:
    """Run the API alone (production: EYAS_DATABASE_URL and EYAS_BROKER_URL set)."""
    run_api(get_settings(), host=host, port=port)


def worker(
    host_name: Annotated[str, typer.Option(help=HOST_NAME_HELP, metavar="NAME")],
    exit_with_pid: Annotated[
        int | None,
        typer.Option(
            help="stop (and stop the running jobs) when this process ends; eyas up passes its own", min=1
        ),
    ] = None,
) -> None:
    """Run the worker of one GPU host (foreground)."""
    from workers.main import start_worker

    if not host_name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        typer.echo("host name may hold letters, digits, '-', '_' and '.' only", err=True)
        raise typer.Exit(2)
    if exit_with_pid is not None and not psutil.pid_exists(exit_with_pid):
        typer.echo(f"--exit-with-pid {exit_with_pid}: no such process", err=True)
        raise typer.Exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings().model_copy(update={"worker_host_name": host_name})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if settings.embedded:
        _wait_for_schema(settings)
    start_worker(settings, host=host_name, exit_with_pid=exit_with_pid)


def _wait_for_schema(settings: Settings, timeout_s: float = 30.0) -> None:
    """In embedded mode the API process migrates; a worker started beside it waits for the tables."""
    from sqlalchemy import inspect

    from app.core.db import get_engine

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if inspect(get_engine(settings)).has_table("job"):
            return
        time.sleep(0.2)
    db_upgrade(settings)


def token_bootstrap(
    name: Annotated[str, typer.Argument(help="a name for the token")] = "admin",
    scope: Annotated[str, typer.Option(help="read, submit or admin")] = "admin",
) -> None:
    """Create a token straight in the database (EYAS_DATABASE_URL): the first admin token of a deployment."""
    from app.tokens import service as tokens

    try:
        wanted = Scope(scope)
    except ValueError:
        typer.echo(f"scope must be read, submit or admin, not {scope!r}", err=True)
        raise typer.Exit(2) from None
    settings = get_settings()
    with session_scope(settings) as session:
        _, secret = tokens.create_token(session, name=name, scopes=[wanted])
    typer.echo(secret)
