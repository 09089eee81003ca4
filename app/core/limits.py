"""ASGI middleware at the edge of every route: request bodies past a size limit get 413 before the app
reads them, and input no route may see (app.core.edge: lone surrogates, non-finite numbers, NUL or bytes that
are not UTF-8 in the URL) gets 422.

A body is read (up to the limit) before the app sees it, so a body streamed without Content-Length is
refused with the same 413 as a declared one; request bodies here are small JSON documents.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.edge import refusal

_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in _WITH_BODY:
            refused = refusal(scope, None)
            if refused is not None:
                await refused(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _reject(send, self.max_bytes)
            return
        body = await _read_body(receive, self.max_bytes)
        if body is None:
            await _reject(send, self.max_bytes)
            return
        refused = refusal(scope, body)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client went away; the app sees an empty or partial body
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: disconnect notifications (SSE, long polls)

    return replayed


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _reject(send: Send, limit: int) -> None:
    body: dict[str, Any] = {
        "type": "https://eyas.dev/problems/body-too-large",
        "title": "Body too large",
        "status": 413,
        "code": "BODY_TOO_LARGE",
        "detail": f"request body exceeds {limit} bytes",
    }
    payload = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
