"""The reference engine's HTTP layer (stdlib ThreadingHTTPServer): SGLang's routes and response shapes."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from drafting.serving.engine._reference_sampling import Sampling
from drafting.serving.engine.reference_engine import GenerateOutcome, GenerateRequest, ReferenceEngine

log = logging.getLogger("eyas.reference_engine")
MAX_BODY_BYTES = 8 * 2**20
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default
_GREEDY_BELOW = 1e-6  # SGLang's _SAMPLING_EPS: a temperature under it decodes greedily


class BadRequest(Exception):
    pass


def serve(engine: ReferenceEngine, *, host: str, port: int) -> int:
    """Bind first (/health_generate says 503 while loading), load in the background, serve until SIGTERM."""
    try:
        server = ThreadingHTTPServer((host, port), _handler_for(engine))
    except OSError as exc:
        log.error(
            "[Errno %s] error while attempting to bind on address (%r, %d): %s", exc.errno, host, port, exc
        )
        return 1
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=_load_or_exit, args=(engine, server), daemon=True).start()
    log.info("Uvicorn-free HTTP server running on http://%s:%d (reference engine)", host, port)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 1 if engine.load_error else 0


def _load_or_exit(engine: ReferenceEngine, server: ThreadingHTTPServer) -> None:
    try:
        engine.load()
    except Exception as exc:  # noqa: BLE001 - a failed load ends the server, like SGLang's
        engine.load_error = f"{type(exc).__name__}: {exc}"
        log.error("Initialization failed: %s\n%s", engine.load_error, traceback.format_exc())
        server.shutdown()


def _generate_or_die(
    engine: ReferenceEngine, request: GenerateRequest, on_step: Any = None
) -> GenerateOutcome:
    """A failure inside decoding ends the server, as an exception in SGLang's scheduler does: the traceback
    after SGLang's `Scheduler hit an exception` line, then the process exits with status 1."""
    try:
        return engine.generate(request, on_step)
    except Exception:  # noqa: BLE001 - any decoding failure is fatal, as in SGLang
        log.error("Scheduler hit an exception: %s", traceback.format_exc().rstrip())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _handler_for(engine: ReferenceEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.engine = engine
    return Handler


class _Handler(BaseHTTPRequestHandler):
    engine: ReferenceEngine
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # BaseHTTPRequestHandler's name
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # http.server's naming
        routes = {
            "/health": self._health,
            "/health_generate": self._health,
            "/server_info": self._server_info,
            "/get_server_info": self._server_info,
            "/v1/models": self._models,
            "/model_info": self._model_info,
            "/get_model_info": self._model_info,
        }
        route = routes.get(self.path.split("?", 1)[0])
        if route is None:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        route()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            body = self._read_json()
            if path == "/generate":
                self._generate(body)
            elif path == "/flush_cache":
                self.engine.flush()
                self._send_text(200, "Cache flushed.\n")
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
        except BadRequest as exc:
            self._send_json(400, {"error": {"message": str(exc)}})

    def _health(self) -> None:
        ready = self.engine.ready.is_set()
        self._send_text(200 if ready else 503, "" if ready else "starting\n")

    def _server_info(self) -> None:
        self._send_json(200, self.engine.server_info())

    def _models(self) -> None:
        options = self.engine.options
        model = {
            "id": options.model,
            "object": "model",
            "root": options.model,
            "owned_by": "eyas-reference-engine",
        }
        self._send_json(200, {"object": "list", "data": [model]})

    def _model_info(self) -> None:
        info = {
            "model_path": self.engine.options.model,
            "is_generation": True,
            "engine": "eyas-reference-engine",
        }
        self._send_json(200, info)

    def _generate(self, body: dict[str, Any]) -> None:
        if not self.engine.ready.is_set():
            self._send_json(503, {"error": {"message": "the server is still starting"}})
            return
        requests, batched = _parse_generate(self.engine, body)
        skip_special = _skip_special_tokens(body)
        if log.isEnabledFor(logging.DEBUG):
            for request in requests:
                log.debug("Receive: %s", json.dumps(_received(self.engine, request)))
        if body.get("stream"):
            if batched:
                raise BadRequest("streaming a batch is not supported by the reference engine")
            self._stream(requests[0], skip_special)
            return
        answers = [self._answer(_generate_or_die(self.engine, request), skip_special) for request in requests]
        self._send_json(200, answers if batched else answers[0])

    def _answer(self, outcome: GenerateOutcome, skip_special: bool) -> dict[str, Any]:
        ids = outcome.result.output_ids
        meta = self.engine.meta_info(outcome, uuid.uuid4().hex)
        return {"text": _decode(self.engine, ids, skip_special), "output_ids": ids, "meta_info": meta}

    def _stream(self, request: GenerateRequest, skip_special: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        request_id, produced = uuid.uuid4().hex, []

        def on_step(tokens: list[int]) -> None:
            produced.extend(tokens)
            meta = {
                "id": request_id,
                "prompt_tokens": len(request.prompt_ids),
                "completion_tokens": len(produced),
            }
            self._send_event({"text": None, "output_ids": list(produced), "meta_info": meta})

        try:
            outcome = _generate_or_die(self.engine, request, on_step)
            self._send_event(self._answer(outcome, skip_special))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log.debug("client went away during a streamed request")

    def _send_event(self, payload: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()

    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise BadRequest(f"request body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise BadRequest(f"invalid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def _send_json(self, status: int, payload: Any) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json")

    def _send_text(self, status: int, text: str) -> None:
        self._send_bytes(status, text.encode(), "text/plain; charset=utf-8")

    def _send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _parse_generate(engine: ReferenceEngine, body: dict[str, Any]) -> tuple[list[GenerateRequest], bool]:
    sampling = body.get("sampling_params") or {}
    if not isinstance(sampling, dict):
        raise BadRequest("sampling_params must be an object")
    max_new = sampling.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if not isinstance(max_new, int) or max_new < 1:
        raise BadRequest("max_new_tokens must be a positive integer")
    how = _sampling(engine, sampling)
    stop_ids = _stop_ids(sampling.get("stop_token_ids"))
    prompts, batched = _prompts(engine, body)
    ignore_eos = bool(sampling.get("ignore_eos", False))
    requests = [
        GenerateRequest(ids, _clip(engine, ids, max_new), ignore_eos, how, stop_ids) for ids in prompts
    ]
    return requests, batched


def _sampling(engine: ReferenceEngine, sampling: dict[str, Any]) -> Sampling | None:
    """None for greedy decoding (temperature 0, as SGLang reads it), else the checked sampling settings."""
    temperature = _number(sampling, "temperature", 1.0)  # SGLang's default
    top_p = _number(sampling, "top_p", 1.0)
    top_k = sampling.get("top_k", -1)
    seed = sampling.get("sampling_seed")
    if not 0 <= temperature < float("inf"):
        raise BadRequest(f"temperature must be a non-negative finite number, got {temperature}")
    if not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k == 0 or top_k < -1:
        raise BadRequest(f"top_k must be -1 (all tokens) or at least 1, got {top_k}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63):
        raise BadRequest(f"sampling_seed must be an integer in [0, 2**63), got {seed!r}")
    if temperature < _GREEDY_BELOW or top_k == 1:
        return None
    if engine.speculative:
        raise BadRequest("the reference engine speculates greedily only: temperature 0, or serve no draft")
    return Sampling(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)


def _number(sampling: dict[str, Any], name: str, default: float) -> float:
    value = sampling.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise BadRequest(f"{name} must be a number")
    return float(value)


def _stop_ids(value: Any) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise BadRequest("stop_token_ids must be a list of token ids")
    return frozenset(value)


def _prompts(engine: ReferenceEngine, body: dict[str, Any]) -> tuple[list[list[int]], bool]:
    if "input_ids" in body:
        ids = body["input_ids"]
        batched = bool(ids) and isinstance(ids[0], list)
        prompts = ids if batched else [ids]
    elif "text" in body:
        texts = body["text"]
        batched = isinstance(texts, list)
        prompts = [_encode(engine, t) for t in (texts if batched else [texts])]
    else:
        raise BadRequest("send input_ids or text")
    vocab = engine.models.vocab_size if engine.models else 0
    for prompt in prompts:
        if not prompt or not all(isinstance(t, int) and 0 <= t < vocab for t in prompt):
            raise BadRequest(f"input_ids must be non-empty lists of token ids below the vocab size {vocab}")
    return prompts, batched


def _clip(engine: ReferenceEngine, prompt: list[int], max_new: int) -> int:
    room = engine.context_length - len(prompt)
    if room < 1:
        raise BadRequest(
            f"the prompt ({len(prompt)} tokens) fills the context length {engine.context_length}"
        )
    return min(max_new, room)


def _encode(engine: ReferenceEngine, text: Any) -> list[int]:
    tokenizer = engine.models.tokenizer if engine.models else None
    if tokenizer is None:
        raise BadRequest(
            "this model folder has no tokenizer: send input_ids (as SGLang with --skip-tokenizer-init)"
        )
    if not isinstance(text, str):
        raise BadRequest("text must be a string or a list of strings")
    return list(tokenizer.encode(text))


def _decode(engine: ReferenceEngine, ids: list[int], skip_special: bool) -> str:
    tokenizer = engine.models.tokenizer if engine.models else None
    return tokenizer.decode(ids, skip_special_tokens=skip_special) if tokenizer is not None else ""


def _skip_special_tokens(body: dict[str, Any]) -> bool:
    """SGLang leaves special tokens (the end-of-turn token among them) out of `text` unless asked."""
    sampling = body.get("sampling_params") or {}
    return bool(sampling.get("skip_special_tokens", True))


def _received(engine: ReferenceEngine, request: GenerateRequest) -> dict[str, Any]:
    """What a request asked for, as the debug log shows it (SGLang logs `Receive: obj=…` with
    --log-requests): the prompt as ids and, with a tokenizer, as text."""
    tokenizer = engine.models.tokenizer if engine.models else None
    how = request.sampling
    return {
        "input_ids": request.prompt_ids,
        "prompt": tokenizer.decode(request.prompt_ids) if tokenizer is not None else None,
        "max_new_tokens": request.max_new_tokens,
        "temperature": how.temperature if how else 0.0,
        "top_p": how.top_p if how else 1.0,
        "sampling_seed": how.seed if how else None,
        "stop_token_ids": sorted(request.stop_ids),
    }
