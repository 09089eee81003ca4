"""Sends a prompt set to a server speaking SGLang's /generate at a fixed concurrency, and times each request.

Streaming (SSE `data:` chunks, as SGLang sends them) gives TTFT and ITL; without it only e2e latency is known.
SGLang's chunks carry cumulative output_ids by default and deltas with --incremental-streaming-output: both
are handled. A chunk that brings several tokens (a speculative step) spreads its gap over them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import ssl
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from drafting.serving.prompts import Prompt


@dataclass(frozen=True)
class LoadOptions:
    max_new_tokens: int = 128
    concurrency: int = 1
    stream: bool = True
    send_as: str = "text"  # or "input_ids" (the prompt's UTF-8 bytes as ids)
    ignore_eos: bool = True
    timeout_s: float = 600.0


@dataclass
class RequestRecord:
    index: int
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    spec_verify_ct: int | None = None
    e2e_s: float = 0.0
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_ids: list[int] | None = None
    text: str | None = None
    finish_reason: str | None = None
    error: str | None = None
    streamed: bool = False

    def row(self) -> dict[str, Any]:
        """The per-request row kept in results (no outputs, no per-token gaps)."""
        return {
            "index": self.index,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "spec_verify_ct": self.spec_verify_ct,
            "e2e_ms": round(self.e2e_s * 1000, 3),
            "ttft_ms": round(self.ttft_s * 1000, 3) if self.ttft_s is not None else None,
            "finish_reason": self.finish_reason,
            "error": self.error,
        }


def request_body(prompt: Prompt, options: LoadOptions, *, stream: bool) -> dict[str, Any]:
    sampling = {
        "max_new_tokens": prompt.max_new_tokens or options.max_new_tokens,
        "temperature": 0.0,
        "ignore_eos": options.ignore_eos,
    }
    body: dict[str, Any] = {"sampling_params": sampling, "stream": stream}
    if prompt.input_ids is not None or options.send_as == "input_ids":
        body["input_ids"] = prompt.ids_or_bytes()
    else:
        body["text"] = prompt.text
    return body


def requests_digest(prompts: Sequence[Prompt], options: LoadOptions) -> str:
    """sha256 of the request bodies a benchmark sends (prompt, token budget, greedy, ignore_eos), in order:
    two results with the same digest asked the same questions the same way, so their per-prompt acceptance
    pairs up (app/benchmarks/paired.py). Streaming is left out: it changes the timing, not the text."""
    bodies = [request_body(prompt, options, stream=False) for prompt in prompts]
    return hashlib.sha256(json.dumps(bodies, sort_keys=True).encode()).hexdigest()


def run_load(url: str, prompts: Sequence[Prompt], options: LoadOptions) -> tuple[list[RequestRecord], float]:
    """All prompts at `options.concurrency`; returns the records (in prompt order) and the wall time."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_drive(url, prompts, options))
    # Called from a thread that already runs an event loop (an embedding app, Playwright's sync API in
    # tests): drive the requests on a loop of their own in another thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _drive(url, prompts, options)).result()


async def _drive(
    url: str, prompts: Sequence[Prompt], options: LoadOptions
) -> tuple[list[RequestRecord], float]:
    pending: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(prompts)):
        pending.put_nowait(index)
    records: list[RequestRecord] = []
    tls = ssl.create_default_context()  # one for all workers: building one costs ~30 ms

    async def worker() -> None:
        # One client (one connection) per worker: httpcore's shared pool rescans every connection on each
        # request, which measured 10x slower at concurrency 64 (python -m bench.client).
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(timeout=options.timeout_s, limits=limits, verify=tls) as client:
            while not pending.empty():
                index = pending.get_nowait()
                body = request_body(prompts[index], options, stream=options.stream)
                records.append(await send_one(client, url, index, body))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(options.concurrency, len(prompts)))))
    wall = time.perf_counter() - started
    return sorted(records, key=lambda r: r.index), wall


async def send_one(client: httpx.AsyncClient, url: str, index: int, body: dict[str, Any]) -> RequestRecord:
    record = RequestRecord(index)
    started = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/generate", json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:300]
                record.error = f"HTTP {response.status_code}: {detail}"
            elif "event-stream" in response.headers.get("content-type", ""):
                await _read_stream(response, record, started)
            else:
                _read_final(record, json.loads(await response.aread()))
    except (httpx.HTTPError, ValueError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    record.e2e_s = time.perf_counter() - started
    return record


async def _read_stream(response: httpx.Response, record: RequestRecord, started: float) -> None:
    record.streamed = True
    seen, last_time, cumulative = 0, started, True
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        chunk = json.loads(payload)
        now = time.perf_counter()
        meta = chunk.get("meta_info") or {}
        count = meta.get("completion_tokens")
        cumulative = _merge_ids(record, chunk.get("output_ids"), count, cumulative)
        total = count if isinstance(count, int) else len(record.output_ids or [])
        new = total - seen
        if new > 0:
            if record.ttft_s is None:
                record.ttft_s = now - started
            else:
                record.itl_s.extend([(now - last_time) / new] * new)
            seen, last_time = total, now
        if meta.get("finish_reason") is not None:
            _read_final(record, chunk, keep_ids=True)


def _merge_ids(record: RequestRecord, ids: Any, count: Any, cumulative: bool) -> bool:
    """Cumulative chunks repeat every id so far (SGLang's default); incremental ones carry the new ids."""
    if not isinstance(ids, list):
        return cumulative
    known = record.output_ids or []
    if cumulative and isinstance(count, int) and len(ids) == count and ids[: len(known)] == known:
        record.output_ids = list(ids)
        return True
    record.output_ids = known + list(ids)
    return False


def _read_final(record: RequestRecord, answer: Any, *, keep_ids: bool = False) -> None:
    if isinstance(answer, list):
        answer = answer[0] if answer else {}
    meta = answer.get("meta_info") or {}
    record.prompt_tokens = meta.get("prompt_tokens")
    record.completion_tokens = int(meta.get("completion_tokens") or 0)
    verify = meta.get("spec_verify_ct")
    record.spec_verify_ct = int(verify) if isinstance(verify, int | float) else None
    finish = meta.get("finish_reason")
    record.finish_reason = finish.get("type") if isinstance(finish, dict) else finish
    if not keep_ids and isinstance(answer.get("output_ids"), list):
        record.output_ids = list(answer["output_ids"])
    if isinstance(answer.get("text"), str):
        record.text = answer["text"]
