"""One /generate request to a server speaking SGLang's native API, and what came back.

The prompt goes as `input_ids` (tokenized by the caller from the rendered template), sampling as SGLang's
`sampling_params`: temperature, top_p, max_new_tokens, `sampling_seed` (SGLang 0.5.x accepts it on every
request and honours it only when the server runs with --enable-deterministic-inference; the reference
engine always honours it) and `stop_token_ids` (the template's end-of-turn token). A 4xx answer concerns
this request only (a prompt longer than the context): RequestRefused, the record is dropped. A transport
error or 5xx is retried a few times, then EngineUnavailable: the server is gone, and the job stops.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import httpx

RETRIES = 3
RETRY_BASE_S = 1.0


class RequestRefused(Exception):
    """The server refused this request (HTTP 4xx); its message says why."""


class EngineUnavailable(Exception):
    """The server did not answer (connection refused or reset, 5xx, timeout) after retries."""


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float
    max_new_tokens: int

    def params(self, seed: int | None, stop_ids: Collection[int]) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
        }
        if self.temperature > 0 and seed is not None:
            sampling["sampling_seed"] = seed
        if stop_ids:
            sampling["stop_token_ids"] = sorted(stop_ids)
        return sampling


@dataclass(frozen=True)
class Completion:
    text: str
    finish: str  # SGLang's finish_reason type: "stop" (an EOS or stop token), "length", "abort"
    completion_tokens: int
    prompt_tokens: int
    # the generated token ids, where the server sent them (SGLang's and the reference engine's /generate do)
    output_ids: tuple[int, ...] | None = None

    @property
    def truncated(self) -> bool:
        return self.finish == "length"


def new_client(timeout_s: float) -> httpx.AsyncClient:
    # One connection per client: the runner gives each in-flight slot its own (httpcore's shared pool
    # rescans every connection per request, measured 10x slower at concurrency 64; see load_client).
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits)


async def complete(
    client: httpx.AsyncClient,
    url: str,
    input_ids: list[int],
    sampling: Sampling,
    *,
    seed: int | None,
    stop_ids: Collection[int],
) -> Completion:
    body = {"input_ids": input_ids, "sampling_params": sampling.params(seed, stop_ids), "stream": False}
    failure = ""
    for attempt in range(RETRIES + 1):
        if attempt:
            await asyncio.sleep(RETRY_BASE_S * 2 ** (attempt - 1))
        try:
            response = await client.post(f"{url}/generate", json=body)
        except httpx.TimeoutException as exc:
            raise EngineUnavailable(f"no answer within the request timeout ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            failure = f"{type(exc).__name__}: {exc}"
            continue
        if response.status_code >= 500:
            failure = f"HTTP {response.status_code}: {response.text.strip()[:300]}"
            continue
        if response.status_code != 200:
            raise RequestRefused(f"HTTP {response.status_code}: {_message(response)}")
        return _completion(response)
    raise EngineUnavailable(f"{failure} (after {RETRIES} retries)")


def _completion(response: httpx.Response) -> Completion:
    try:
        answer = response.json()
    except ValueError as exc:
        raise EngineUnavailable(f"the server answered something not JSON: {response.text[:200]!r}") from exc
    if isinstance(answer, list):  # a batch answer to a single prompt: never sent, but read it right
        answer = answer[0] if answer else {}
    meta = answer.get("meta_info") if isinstance(answer, dict) else None
    if not isinstance(meta, dict) or not isinstance(answer.get("text"), str):
        raise EngineUnavailable(f"the server's answer has no text and meta_info: {str(answer)[:200]}")
    finish = meta.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, dict) else finish
    return Completion(
        text=answer["text"],
        finish=str(kind) if kind is not None else "unknown",
        completion_tokens=_count(meta.get("completion_tokens")),
        prompt_tokens=_count(meta.get("prompt_tokens")),
        output_ids=_ids(answer.get("output_ids")),
    )


def _ids(value: Any) -> tuple[int, ...] | None:
    """Token ids as sent (None unless a list of non-negative ints: a read never trusts a shape)."""
    if not isinstance(value, list):
        return None
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        return None
    return tuple(value)


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _message(response: httpx.Response) -> str:
    """SGLang's error bodies: {"error": {"message"}} or {"object": "error", "message"}; else the text."""
    try:
        body = response.json()
    except (ValueError, json.JSONDecodeError):
        return response.text.strip()[:300]
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else body.get("message")
        if isinstance(message, str):
            return message[:300]
    return str(body)[:300]
