"""HEAD and OPTIONS for every route, at the edge.

HEAD is answered as GET is (the same status, headers, token check and all) without the body: health
checks and link checkers use it. OPTIONS names the methods a path takes (`Allow`), with no token needed:
the same methods a 405 names. A path no route has is left to the app (its 404).
"""

from __future__ import annotations

from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAndOptions:
    def __init__(self, app: ASGIApp, routes: list[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        allowed = self._allowed(scope)
        if scope["method"] == "OPTIONS" and allowed:
            await _no_content(send, allowed)
            return
        if scope["method"] == "HEAD" and "GET" in allowed:
            await self.app({**scope, "method": "GET"}, *_headless(receive, send))
            return
        await self.app(scope, receive, send)

    def _allowed(self, scope: Scope) -> list[str]:
        """Every method some route takes at this path (HEAD with GET; OPTIONS always), sorted; [] when
        no route has the path. A route whose path matches answers PARTIAL when the method is not its own."""
        methods: set[str] = set()
        for route in iter_route_contexts(self.routes):  # included routers' routes, flattened
            match, _ = route.matches(scope)
            if match is not Match.NONE and route.methods:
                methods |= set(route.methods)
        if "GET" in methods:
            methods.add("HEAD")
        return sorted(methods | {"OPTIONS"}) if methods else []


def _headless(receive: Receive, send: Send) -> tuple[Receive, Send]:
    """The GET's response with its body dropped; once its headers are sent, the app is told the client
    left, so a stream (a log followed live) ends instead of running on unseen."""
    started = False

    async def send_headers_only(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
            await send(message)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # the body is never sent; the headers above already ended the response

    async def receive_until_sent() -> Message:
        if started:
            return {"type": "http.disconnect"}
        return await receive()

    return receive_until_sent, send_headers_only


async def _no_content(send: Send, allowed: list[str]) -> None:
    headers = [(b"allow", ", ".join(allowed).encode()), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
