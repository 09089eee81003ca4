"""How many requests per second eyas's benchmark client can drive, against a server that answers instantly.

The server (raw ASGI on uvicorn, its own process) returns a canned SGLang /generate answer, streamed as
SSE chunks or as one JSON body, so the figure is the client's own ceiling: a benchmark whose server is faster
than this measures the client, not the server.

    python -m bench.client [--small]
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import time
from typing import Any

from bench import _cli as cli
from drafting.serving.benchmark.load_client import LoadOptions, run_load
from drafting.serving.launch.host_checks import free_port
from drafting.serving.prompts import Prompt

TOKENS_PER_ANSWER = 16


def _chunk(ids: list[int], finished: bool) -> bytes:
    meta: dict[str, Any] = {"completion_tokens": len(ids), "prompt_tokens": 8}
    if finished:
        meta.update(finish_reason={"type": "length"}, spec_verify_ct=len(ids) // 2, e2e_latency=0.0)
    return json.dumps({"output_ids": ids, "meta_info": meta}).encode()


async def instant_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers any POST /generate at once: SSE chunks of 2 tokens when asked to stream, else one body."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    stream = b'"stream": true' in body
    ids = list(range(TOKENS_PER_ANSWER))
    if not stream:
        payload = _chunk(ids, True)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    )
    for end in range(2, TOKENS_PER_ANSWER + 1, 2):
        event = b"data: " + _chunk(ids[:end], end == TOKENS_PER_ANSWER) + b"\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def _serve(port: int) -> None:
    import uvicorn

    uvicorn.run(instant_app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _wait_listening(port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the instant server did not start")


def measure(url: str, requests: int, concurrency: int, stream: bool) -> dict[str, Any]:
    prompts = [Prompt(input_ids=[1, 2, 3, 4, 5, 6, 7, 8])] * requests
    options = LoadOptions(max_new_tokens=TOKENS_PER_ANSWER, concurrency=concurrency, stream=stream)
    cpu_before = time.process_time()
    records, wall = run_load(url, prompts, options)
    cpu = time.process_time() - cpu_before
    failed = sum(r.error is not None for r in records)
    return {
        "concurrency": concurrency,
        "stream": stream,
        "requests": requests,
        "failed": failed,
        "requests_per_s": round(requests / wall, 1),
        "client_cpu_ms_per_request": round(cpu / requests * 1000, 3),
        "chunks_per_s": round(requests * TOKENS_PER_ANSWER / 2 / wall, 1) if stream else None,
    }


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--small", action="store_true", help="fewer requests (well under a minute)")
    args = parser.parse_args()
    requests = 300 if args.small else 3000
    port = free_port()
    server = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    try:
        _wait_listening(port)
        url = f"http://127.0.0.1:{port}"
        measure(url, 50, 4, True)  # warm-up: connections, imports
        runs = [measure(url, requests, c, s) for s in (False, True) for c in (1, 8, 64)]
    finally:
        server.terminate()
        server.join(5)
    print(json.dumps({"bench": "client", "cpu_count": os.cpu_count(), "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
