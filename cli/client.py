"""A small HTTP client for the CLI: base URL and token, problem+json errors turned into exit codes."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any, NoReturn

import httpx
import typer

from drafting.userfiles import Cap, UserFileError, read_user_json_object

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_USAGE = 2
EXIT_JOB_CANCELLED = 3
EXIT_TIMEOUT = 4
EXIT_UNREACHABLE = 5


class Api:
    def __init__(self, url: str, token: str | None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            fail(f"cannot reach the eyas API at {self.http.base_url}: {exc}", EXIT_UNREACHABLE)
        if response.status_code >= 500:  # the API answered but failed: say so, not "unreachable"
            fail(f"the eyas API failed on {method} {path}: {_problem_text(response)}", EXIT_UNREACHABLE)
        if response.status_code >= 400:
            fail(_problem_text(response), EXIT_USAGE)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()


def _problem_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:500]}"
    detail = body.get("detail", body)
    code = body.get("code", f"HTTP_{response.status_code}")
    lines = [f"error {response.status_code} {code}: {detail}"]
    for err in body.get("errors", [])[1:5]:
        lines.append(f"  {err.get('field')}: {err.get('message')}")
    return "\n".join(lines)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    typer.echo(message, err=True)
    sys.exit(code)


def exit_code_for(state: str) -> int:
    """The exit code of a command that waited for a job or pipeline to end in `state`."""
    return {"succeeded": EXIT_OK, "cancelled": EXIT_JOB_CANCELLED}.get(state, EXIT_JOB_FAILED)


def parse_uuid(value: str, what: str) -> str:
    """`value` as a canonical UUID, or a usage error naming `what` (job, pipeline…) it should identify."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        fail(f"{value!r} is not a {what} id (a UUID)")


def load_json_object(file: Path) -> dict[str, Any]:
    """A spec file's JSON object, or a usage error (exit 2) when it is unreadable, not a regular file (a FIFO
    or /dev/zero would hang or fill memory), larger than Cap.SPEC, or holds something else."""
    try:
        return read_user_json_object(file, Cap.SPEC, "spec file")
    except UserFileError as exc:
        fail(f"cannot read {exc}", EXIT_USAGE)
