"""Commands that talk to an eyas API: submit, status, wait, cancel, hosts, logs, compare, tokens."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.client import (
    EXIT_JOB_FAILED,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    Api,
    exit_code_for,
    fail,
    load_json_object,
    parse_uuid,
)

UrlOpt = Annotated[str, typer.Option("--url", envvar="EYAS_URL", help="eyas API URL")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="EYAS_TOKEN", help="bearer token")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
DEFAULT_URL = "http://127.0.0.1:8000"
console = Console()


def parse_param(raw: str) -> tuple[str, Any]:
    """k=v; v is parsed as JSON when it is valid JSON (numbers, true, lists), else kept as a string."""
    key, sep, value = raw.partition("=")
    if not sep or not key:
        fail(f"--param wants key=value, got {raw!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def submit(
    kind: Annotated[str, typer.Argument(help="job kind, e.g. selftest, gpu_check, extract, train")],
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="k=v (repeat)")] = None,
    file: Annotated[
        Path | None, typer.Option("-f", "--file", help="JSON spec: {params, host, gpus, …}")
    ] = None,
    host: Annotated[str | None, typer.Option(help="host to run on")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs to hold")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Idempotency-Key header")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job."""
    body: dict[str, Any] = {"kind": kind, "params": {}}
    if file is not None:
        body.update(load_json_object(file))
        body["kind"] = kind
    body["params"].update(dict(parse_param(p) for p in param or []))
    if host:
        body["host"] = host
    if gpus is not None:
        body["gpus"] = gpus
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    job = Api(url, token).json("POST", "/v1/jobs", json=body, headers=headers)
    _print_job(job, as_json)


def status(job_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Show a job."""
    _print_job(Api(url, token).json("GET", f"/v1/jobs/{parse_uuid(job_id, 'job')}"), as_json)


def cancel(job_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Cancel a job (queued: at once; running: its process group is ended)."""
    _print_job(Api(url, token).json("POST", f"/v1/jobs/{parse_uuid(job_id, 'job')}/cancel"), as_json)


def wait(
    job_id: str,
    timeout: Annotated[float, typer.Option(help="seconds to wait (0 = forever)")] = 0,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Wait for a job to end. Exit 0 succeeded, 1 failed, 3 cancelled, 4 timed out, 5 API unreachable."""
    api = Api(url, token, timeout_s=90)
    deadline = time.monotonic() + timeout if timeout else None
    job_path = f"/v1/jobs/{parse_uuid(job_id, 'job')}"
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
        console=console,
        disable=as_json,
        transient=True,
    ) as bar:
        task = bar.add_task("waiting", total=1.0)
        while True:
            left = 10.0 if deadline is None else max(0.0, min(10.0, deadline - time.monotonic()))
            try:
                job = api.json("GET", f"{job_path}/wait", params={"timeout": left})
            except SystemExit as exc:
                if exc.code == EXIT_UNREACHABLE and (deadline is None or time.monotonic() < deadline):
                    time.sleep(2)  # the API restarting: keep waiting
                    continue
                raise
            message = f"{job['state']} {job.get('progress_message') or ''}"[:60]
            bar.update(task, completed=job.get("progress") or 0.0, description=message)
            if job["terminal"] or (deadline is not None and time.monotonic() >= deadline):
                break
    _print_job(job, as_json)
    raise typer.Exit(_exit_code(job))


def _exit_code(job: dict[str, Any]) -> int:
    if not job["terminal"]:
        return EXIT_TIMEOUT
    return exit_code_for(job["state"])


def hosts(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List GPU hosts."""
    columns: dict[str, Cell] = {
        "host": lambda h: h["name"],
        "online": lambda h: "yes" if h["online"] else "no",
        "GPUs": lambda h: str(h["gpu_count"]),
        "leases": lambda h: str(len(h["leases"])),
        "note": lambda h: h.get("gpu_error") or "",
    }
    _print_rows(Api(url, token).json("GET", "/v1/hosts"), columns, as_json)


def logs(
    job_id: str,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="follow live until the job ends")] = False,
    tail: Annotated[int | None, typer.Option(help="only the last N lines")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON object per line (seq, ts, stream, text), for scripts")
    ] = False,
) -> None:
    """Print a job's log; with -f follow it live and exit with the job's outcome (0 succeeded, 1 failed,
    3 cancelled)."""
    api = Api(url, token)
    job_id = parse_uuid(job_id, "job")
    show = _json_line if as_json else _text_line
    params: dict[str, Any] = {"tail": tail} if tail else {"limit": 5000}
    page = api.json("GET", f"/v1/jobs/{job_id}/logs", params=params)
    for line in page["lines"]:
        show(line)
    cursor = page["next_cursor"]
    if not tail:
        while not page["complete"] and page["lines"]:
            page = api.json("GET", f"/v1/jobs/{job_id}/logs", params={"cursor": cursor, "limit": 5000})
            for line in page["lines"]:
                show(line)
            cursor = page["next_cursor"]
    if follow:
        state = _follow(api, job_id, cursor, show)
        raise typer.Exit(exit_code_for(state))


def _text_line(line: dict[str, Any]) -> None:
    typer.echo(line["text"])


def _json_line(line: dict[str, Any]) -> None:
    typer.echo(json.dumps(line))


def _follow(api: Api, job_id: str, cursor: int, show: Callable[[dict[str, Any]], None]) -> str:
    """SSE follow, resuming from the last seen id after a dropped connection."""
    while True:
        try:
            headers = {"Last-Event-ID": str(cursor), "Accept": "text/event-stream"}
            with api.http.stream(
                "GET", f"/v1/jobs/{job_id}/logs/stream", headers=headers, timeout=None
            ) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    api.request("GET", f"/v1/jobs/{job_id}/logs")  # renders the error and exits
                event: dict[str, str] = {}
                for raw in resp.iter_lines():
                    if raw:
                        name, _, value = raw.partition(": ")
                        event[name] = value
                        continue
                    if event.get("event") == "line":
                        line = json.loads(event["data"])
                        show(line)
                        cursor = line["seq"]
                    elif event.get("event") == "end":
                        return str(json.loads(event["data"])["state"])
                    event = {}
        except httpx.TransportError:
            time.sleep(1)


Cell = Callable[[dict[str, Any]], str]


class Require(StrEnum):
    """What `eyas compare --require` asks of draft a on every config both measured (a CI gate)."""

    a_ahead = "a-ahead"  # a accepts more: the interval of a - b lies above zero
    not_behind = "not-behind"  # b does not accept more: the interval does not lie below zero


def compare(
    a: Annotated[str, typer.Argument(help="benchmark id of draft a")],
    b: Annotated[str, typer.Argument(help="benchmark id of draft b")],
    require: Annotated[
        Require | None,
        typer.Option(help="exit 1 unless draft a is ahead of b (a-ahead) or not behind it (not-behind)"),
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Two drafts' benchmarks of the same requests, paired by prompt: which accepts more, and how surely.

    Exit 0 compared (and --require met), 1 --require not met (the configs are named), 2 bad ids, an unknown
    benchmark or two that cannot be paired (409 NOT_COMPARABLE: they asked different requests), 5 API
    unreachable or failing."""
    params = {"a": parse_uuid(a, "benchmark"), "b": parse_uuid(b, "benchmark")}
    body = Api(url, token).json("GET", "/v1/benchmarks/compare", params=params)
    if as_json:
        typer.echo(json.dumps(body, indent=2))
    else:
        _print_comparison(body)
    if require is None:
        return
    failing = [c["config"] for c in body["configs"] if not _meets(c, require)]
    if failing:
        fail(f"--require {require.value}: not met at {', '.join(failing)}", EXIT_JOB_FAILED)


def _meets(config: dict[str, Any], require: Require) -> bool:
    return bool(config["ci_low"] > 0 if require is Require.a_ahead else config["ci_high"] >= 0)


def _print_comparison(body: dict[str, Any]) -> None:
    for side in ("a", "b"):  # a path may hold [brackets]: printed as it is, not read as rich markup
        console.print(f"{side}: {body[side]['draft'] or body[side]['url']}", markup=False, highlight=False)
    columns: dict[str, Cell] = {
        "config": lambda c: c["config"],
        "a": lambda c: f"{c['a_accept_len']:.3f}",
        "b": lambda c: f"{c['b_accept_len']:.3f}",
        "a − b": lambda c: f"{c['difference']:+.3f}",
        f"{body['confidence']:.0%} interval": lambda c: f"{c['ci_low']:+.3f} … {c['ci_high']:+.3f}",
        "prompts a / b / tied": "{a_ahead_prompts} / {b_ahead_prompts} / {tied_prompts}".format_map,
    }
    _print_rows(body["configs"], columns, as_json=False)
    for config in body["configs"]:
        console.print(f"{config['config']}: {config['verdict']}", soft_wrap=True)
    for note in body["notes"]:
        console.print(f"note: {note}", soft_wrap=True)


def _print_rows(rows: list[dict[str, Any]], columns: dict[str, Cell], as_json: bool) -> None:
    """A list as JSON for scripts, or as a table: one column per header, its cell read from each row."""
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(*columns)
    for row in rows:
        table.add_row(*(cell(row) for cell in columns.values()))
    console.print(table)


def _print_job(job: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(job, indent=2))
        return
    table = Table(show_header=False, box=None)
    for key in (
        "id",
        "kind",
        "state",
        "host",
        "attempt",
        "progress",
        "termination_reason",
        "exit_code",
        "message",
    ):
        value = job.get(key)
        if value is not None:
            table.add_row(f"[bold]{key}[/bold]", str(value))
    console.print(table)


def token_create(
    name: str,
    scope: Annotated[list[str], typer.Option("--scope", help="read, submit or admin (repeat)")],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a token (admin). The secret is printed once."""
    created = Api(url, token).json("POST", "/v1/tokens", json={"name": name, "scopes": scope})
    typer.echo(json.dumps(created, indent=2) if as_json else created["token"])


def token_list(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List tokens (admin)."""
    columns: dict[str, Cell] = {
        "id": lambda t: t["id"],
        "name": lambda t: t["name"],
        "prefix": lambda t: t["prefix"],
        "scopes": lambda t: ",".join(t["scopes"]),
        "revoked": lambda t: t["revoked_at"] or "",
    }
    _print_rows(Api(url, token).json("GET", "/v1/tokens"), columns, as_json)


def token_revoke(token_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Revoke a token (admin); it stops working at once."""
    Api(url, token).json("POST", f"/v1/tokens/{parse_uuid(token_id, 'token')}/revoke")
    typer.echo(f"revoked {token_id}")
