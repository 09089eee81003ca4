"""A small HTTP client for the CLI: base URL and token, problem+json errors turned into exit codes."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import httpx
import typer

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
        if response.status_code >= 400:
            fail(_problem_text(response), EXIT_USAGE if response.status_code < 500 else EXIT_UNREACHABLE)
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
