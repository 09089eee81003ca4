"""`eyas launch`: check a launch spec (--dry-run), here or on a GPU host through the API, or submit it.

Locally (no --host/--url), a dry run does what a launch job does on its host before it starts anything, on
this machine: render the argv, SGLang's own parser (where sglang is installed), eyas's rules, the draft
doctor, the paths, the port, /dev/shm and the GPUs NVML sees. Exit 0 when nothing is an error, 1 when a
finding is, 2 for a spec that does not validate; the findings are printed either way (--json for scripts).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from cli.client import EXIT_JOB_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, Api, fail, load_json_object


def launch(
    file: Annotated[
        Path, typer.Option("-f", "--file", help="launch spec as JSON (the params of a launch job)")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="render and check only; start nothing")] = False,
    host: Annotated[
        str | None, typer.Option(help="GPU host to check (or launch) on, through the API")
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="eyas API URL (default $EYAS_URL); given, the dry run runs there")
    ] = None,
    token: Annotated[str | None, typer.Option("--token", envvar="EYAS_TOKEN", help="bearer token")] = None,
    timeout: Annotated[
        float, typer.Option(min=1, max=300, help="seconds to wait for the host's answer")
    ] = 90,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
) -> None:
    """Check a launch spec before anything starts (--dry-run), or submit it as a launch job.

    --dry-run without --host/--url runs every check on this machine; with them, on the host through the API.
    Exit 0: no error finding; 1: an error finding; 2: the spec itself is invalid."""
    spec, spec_host = _read_spec(file)
    host = host or spec_host
    remote = host is not None or url is not None
    api_url = url or _settings_url()
    if not dry_run:
        if not remote:
            fail("a launch starts a server on a GPU host: give --host or --url (or --dry-run to check here)")
        _submit(Api(api_url, token), spec, host, as_json)
        return
    report = _render_remote(api_url, token, spec, host, timeout) if remote else _render_local(spec)
    _print_report(report, as_json)
    raise typer.Exit(report.pop("_exit"))


def _settings_url() -> str:
    """EYAS_URL (through the settings, the one reader of the environment), else the local default."""
    from app.core.config import get_settings

    return get_settings().url


def _read_spec(file: Path) -> tuple[dict[str, Any], str | None]:
    """A launch spec, or a job spec ({"params": {...}, "host": ...}) whose params are one."""
    loaded = load_json_object(file)
    params = loaded.get("params")
    if isinstance(params, dict) and "model" not in loaded:
        host = loaded.get("host")
        return params, host if isinstance(host, str) else None
    return loaded, None


def _render_local(spec: dict[str, Any]) -> dict[str, Any]:
    import sys

    from pydantic import ValidationError

    from contract.params.launch import LaunchParams
    from drafting.serving.launch.checks import prepare_launch
    from drafting.serving.launch.render import HostFacts
    from drafting.serving.launch.sglang_parser import installed_sglang_version

    try:
        params = LaunchParams.model_validate({**spec, "dry_run": True})
    except ValidationError as exc:
        findings = [
            _invalid(".".join(map(str, e["loc"])), str(e["msg"]).removeprefix("Value error, "))
            for e in exc.errors()
        ]
        return {"ok": False, "where": "local", "findings": findings, "_exit": EXIT_USAGE}
    here = HostFacts(python=sys.executable, sglang_version=installed_sglang_version(), on_host=True)
    rendered = prepare_launch(params, host=here)
    result = {"where": "local", **rendered.as_dict()}
    return {**result, "_exit": EXIT_OK if result["ok"] else EXIT_JOB_FAILED}


def _render_remote(
    url: str, token: str | None, spec: dict[str, Any], host: str | None, timeout: float
) -> dict[str, Any]:
    api = Api(url, token, timeout_s=timeout + 30)
    body = {"spec": spec, "host": host, "timeout": timeout}
    try:
        response = api.http.post("/v1/launch/render", json=body)
    except httpx.TransportError as exc:
        fail(f"cannot reach the eyas API at {url}: {exc}", EXIT_UNREACHABLE)
    if response.status_code == 422:
        problem = response.json()
        errors = problem.get("errors") or [{"field": "spec", "message": problem.get("detail", "")}]
        findings = [_invalid(str(e.get("field")), str(e.get("message"))) for e in errors]
        return {"ok": False, "where": host or url, "findings": findings, "_exit": EXIT_USAGE}
    if response.status_code >= 400:
        api.request("POST", "/v1/launch/render", json=body)  # prints the problem and exits
    result = response.json()
    return {"where": host or url, **result, "_exit": EXIT_OK if result["ok"] else EXIT_JOB_FAILED}


def _submit(api: Api, spec: dict[str, Any], host: str | None, as_json: bool) -> None:
    from cli.remote import _print_job

    body: dict[str, Any] = {"kind": "launch", "params": spec}
    if host:
        body["host"] = host
    _print_job(api.json("POST", "/v1/jobs", json=body), as_json)


def _invalid(field: str, message: str) -> dict[str, str]:
    return {"code": "INVALID_SPEC", "severity": "error", "message": f"{field}: {message}", "fix": ""}


def _print_report(report: dict[str, Any], as_json: bool) -> None:
    shown = {k: v for k, v in report.items() if k != "_exit"}
    if as_json:
        typer.echo(json.dumps(shown, indent=2))
        return
    if shown.get("argv"):
        typer.echo(f"engine: {shown.get('engine')}  (checked on {shown.get('where')})")
        typer.echo(f"argv:   {shlex.join(shown['argv'])}")
        env = shown.get("env") or {}
        typer.echo("env:    " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())))
    findings = shown.get("findings") or []
    for finding in findings:
        fix = f"\n      fix: {finding['fix']}" if finding.get("fix") else ""
        typer.echo(f"  [{finding['severity']}] {finding['code']}: {finding['message']}{fix}")
    errors = sum(1 for f in findings if f.get("severity") == "error")
    if shown.get("ok"):
        typer.echo(f"ok: nothing would stop this launch ({len(findings)} finding(s), no error)")
    else:
        why = shown.get("message") or ""
        typer.echo(f"refused: {errors} error(s){f' ({why})' if why and not errors else ''}")
