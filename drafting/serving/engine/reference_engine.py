"""eyas's reference engine: a small server speaking the part of SGLang's HTTP API eyas uses.

    python -m drafting.serving.engine.reference_engine --model T [--draft D --depth K] --port P

It is NOT SGLang: it decodes one request at a time in torch, greedily (with real greedy chain speculative
decoding when a draft is given) or by sampling (temperature, top_p, top_k, sampling_seed; without a draft),
so the whole pipeline can run on a laptop or in CI. It says so in its first log line and in /server_info.
Endpoints: /health_generate (503 until warm), /generate (meta_info as SGLang's), /server_info, /flush_cache,
/v1/models. Logs SGLang's `Decode batch …` and ready lines; at log level debug, each request it receives.

A request stops, as in SGLang, at the model's EOS tokens (config.json, generation_config.json and the
tokenizer's eos_token) and at the request's `stop_token_ids`, unless it asks for ignore_eos.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafting.serving.engine._engine_stats import DecodeBatchLog, SpecCounters
from drafting.serving.engine._reference_sampling import Sampling, sample_decode
from drafting.serving.engine.decoding import DecodeLimits, DecodeResult, greedy_decode, speculative_decode
from drafting.serving.engine.models import DTYPES, LoadedModels, load_models, pick_device, token_ids
from drafting.sglang_facts import READY_LINE

ENGINE_NAME = "eyas-reference-engine"
log = logging.getLogger("eyas.reference_engine")


@dataclass(frozen=True)
class EngineOptions:
    model: str
    draft: str | None = None
    depth: int = 3
    device: str = "auto"
    dtype: str = "float32"
    context_length: int | None = None
    max_running_requests: int | None = None
    decode_log_interval: int = 40
    trust_remote_code: bool = False


@dataclass(frozen=True)
class GenerateRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    ignore_eos: bool = False
    sampling: Sampling | None = None  # None: greedy
    stop_ids: frozenset[int] = frozenset()


@dataclass(frozen=True)
class GenerateOutcome:
    result: DecodeResult
    prompt_tokens: int
    latency_s: float


class ReferenceEngine:
    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.ready = threading.Event()
        self.load_error: str | None = None
        self.dtype_fault: str | None = (
            None  # what SGLang 0.5.14's draft fc would raise (see sglang_dtype_fault)
        )
        self.models: LoadedModels | None = None
        self.eos_ids: frozenset[int] = frozenset()
        self.counters = SpecCounters()
        self._lock = threading.Lock()
        self._queued = 0
        self._started_at = time.time()
        depth = options.depth if options.draft else 0
        self.batch_log = DecodeBatchLog(options.decode_log_interval, depth, self.counters)

    @property
    def speculative(self) -> bool:
        return self.options.draft is not None

    @property
    def context_length(self) -> int:
        if self.options.context_length:
            return self.options.context_length
        assert self.models is not None
        return int(getattr(self.models.target.config, "max_position_embeddings", 2048))

    def load(self) -> None:
        """Load the models, run a warm-up request, then answer /health_generate with 200."""
        options = self.options
        started = time.monotonic()
        device, dtype = pick_device(options.device), DTYPES[options.dtype]
        log.info("Load weight begin. device=%s, dtype=%s", device, options.dtype)
        self.models = load_models(
            options.model,
            options.draft,
            device=device,
            dtype=dtype,
            trust_remote_code=options.trust_remote_code,
        )
        self.eos_ids = stop_token_ids(self.models)
        if options.draft:
            self.dtype_fault = sglang_dtype_fault(options.model, options.draft)
        kinds = type(self.models.target).__name__ + (", Eagle3Drafter" if self.models.drafter else "")
        log.info("Load weight end. elapsed=%.2f s, type=%s", time.monotonic() - started, kinds)
        self.generate(GenerateRequest([0], max_new_tokens=1), on_step=None, count=False)
        self.ready.set()
        log.info(READY_LINE)

    def generate(
        self, request: GenerateRequest, on_step: Any = None, *, count: bool = True
    ) -> GenerateOutcome:
        """Decode one request (requests queue on a lock: the engine runs one at a time)."""
        assert self.models is not None
        models = self.models
        eos = frozenset() if request.ignore_eos else self.eos_ids | request.stop_ids
        limits = DecodeLimits(request.max_new_tokens, eos)
        self._queued += 1
        with self._lock:
            self._queued -= 1
            started = time.monotonic()
            step_hook = self._step_hook(len(request.prompt_ids), on_step) if count else on_step
            if models.drafter is not None and self.dtype_fault and count:
                raise RuntimeError(self.dtype_fault)
            if request.sampling is not None:
                result = sample_decode(models.target, request.prompt_ids, limits, request.sampling, step_hook)
            elif models.drafter is None:
                result = greedy_decode(models.target, request.prompt_ids, limits, step_hook)
            else:
                drafter, depth = models.drafter, self.options.depth
                result = speculative_decode(
                    models.target, drafter, request.prompt_ids, limits, depth, step_hook
                )
            latency = time.monotonic() - started
            if count:
                self.counters.add(result)
        return GenerateOutcome(result, len(request.prompt_ids), latency)

    def _step_hook(self, prompt_tokens: int, on_step: Any) -> Any:
        produced = [0]

        def hook(tokens: list[int]) -> None:
            if produced[0]:  # the first call is the prefill's token, not a decode iteration
                cached = prompt_tokens + produced[0]
                self.batch_log.step(len(tokens), cached_tokens=cached, queued=self._queued)
            produced[0] += len(tokens)
            if on_step is not None:
                on_step(tokens)

        return hook

    def flush(self) -> None:
        with self._lock:
            self.counters = SpecCounters()
            self.batch_log.counters = self.counters

    def meta_info(self, outcome: GenerateOutcome, request_id: str) -> dict[str, Any]:
        result = outcome.result
        finish: dict[str, Any] = {"type": result.finish_reason}
        if result.finish_reason == "length":
            finish["length"] = len(result.output_ids)
        else:
            finish["matched"] = result.output_ids[-1]
        meta: dict[str, Any] = {
            "id": request_id,
            "finish_reason": finish,
            "prompt_tokens": outcome.prompt_tokens,
            "completion_tokens": len(result.output_ids),
            "cached_tokens": 0,
            "e2e_latency": outcome.latency_s,
        }
        if self.speculative:
            meta.update(_spec_meta(result))
        return meta

    def server_info(self) -> dict[str, Any]:
        options, counters = self.options, self.counters
        state: dict[str, Any] = {
            "last_gen_throughput": counters.last_gen_throughput,
            "spec_total_verify_ct": counters.verify_ct,
            "spec_total_accept_tokens": counters.accept_tokens,
            "spec_total_completion_tokens": counters.completion_tokens,
            "spec_total_requests": counters.requests,
        }
        if self.speculative and counters.avg_accept_length is not None:
            state["avg_spec_accept_length"] = counters.avg_accept_length
        return {
            "engine": ENGINE_NAME,
            "note": "eyas's reference engine, not SGLang: one request at a time, torch",
            "model_path": options.model,
            "speculative_algorithm": "EAGLE3" if self.speculative else None,
            "speculative_draft_model_path": options.draft,
            "speculative_num_steps": options.depth if self.speculative else None,
            "speculative_eagle_topk": 1 if self.speculative else None,
            "speculative_num_draft_tokens": options.depth + 1 if self.speculative else None,
            "max_running_requests": options.max_running_requests,
            "context_length": self.context_length if self.models else options.context_length,
            "startup_time": self._started_at,
            "internal_states": [state],
            "version": ENGINE_NAME,
        }


def stop_token_ids(models: LoadedModels) -> frozenset[int]:
    """The ids a request stops at, as SGLang gathers them: config.json's eos_token_id, generation_config's
    (where chat models often name their end-of-turn token) and the tokenizer's eos_token."""
    ids = set(models.eos_ids)
    generation = getattr(models.target, "generation_config", None)
    ids |= token_ids(getattr(generation, "eos_token_id", None))
    ids |= token_ids(getattr(models.tokenizer, "eos_token_id", None))
    return frozenset(ids)


_DTYPE_NAMES = {"bfloat16": "c10::BFloat16", "float16": "c10::Half", "float32": "c10::Half"}


def sglang_model_dtype(config: dict[str, Any]) -> str:
    """The dtype SGLang 0.5.14 builds a model in (--dtype auto): the config's torch_dtype (transformers 5
    also reads `dtype`); none, or float32, becomes float16."""
    declared = str(config.get("torch_dtype") or config.get("dtype") or "float16").removeprefix("torch.")
    return "float16" if declared == "float32" else declared


def sglang_dtype_fault(model: str, draft: str) -> str | None:
    """The error SGLang 0.5.14 raises at the first speculative forward when the draft's dtype differs from
    the target's (measured on an H200: a draft config without torch_dtype is built in float16 and the
    scheduler dies in llama_eagle3.py `self.fc` with a bf16 target). The reference engine computes in one
    dtype, so it raises the same error itself, rather than serving a draft that SGLang cannot."""

    def config(folder: str) -> dict[str, Any]:
        loaded = json.loads((Path(folder) / "config.json").read_text())
        text = loaded.get("text_config")
        return {**loaded, **text} if isinstance(text, dict) else loaded

    target_dtype, draft_dtype = sglang_model_dtype(config(model)), sglang_model_dtype(config(draft))
    if target_dtype == draft_dtype:
        return None
    names = _DTYPE_NAMES.get(target_dtype, target_dtype), _DTYPE_NAMES.get(draft_dtype, draft_dtype)
    return (
        f"expected mat1 and mat2 to have the same dtype, but got: {names[0]} != {names[1]} "
        f"(reference engine, as SGLang 0.5.14: target built in {target_dtype}, draft in {draft_dtype}; "
        "a draft config without torch_dtype is built in float16)"
    )


def _spec_meta(result: DecodeResult) -> dict[str, Any]:
    correct, proposed = sum(result.accepted_drafts), result.verify_ct * result.depth
    return {
        "spec_verify_ct": result.verify_ct,
        "spec_accept_length": result.accept_length,
        "spec_accept_rate": correct / proposed if proposed else 0.0,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m drafting.serving.engine.reference_engine", description=__doc__
    )
    parser.add_argument("--model", required=True, help="target model folder (HF layout)")
    parser.add_argument("--draft", help="drafter folder (SGLang layout); none = no speculation")
    parser.add_argument("--depth", type=int, default=3, help="draft tokens per step (chain)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--context-length", type=int)
    parser.add_argument("--max-running-requests", type=int)
    parser.add_argument("--decode-log-interval", type=int, default=40)
    parser.add_argument("--cpu-threads", type=int, default=0, help="torch CPU threads (0: half the cores)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="the target's text model may run its folder's code"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stdout,
    )
    _limit_cpu_threads(args.cpu_threads)
    from drafting.serving.engine._reference_http import serve

    options = EngineOptions(
        model=args.model,
        draft=args.draft,
        depth=args.depth,
        device=args.device,
        dtype=args.dtype,
        context_length=args.context_length,
        max_running_requests=args.max_running_requests,
        decode_log_interval=args.decode_log_interval,
        trust_remote_code=args.trust_remote_code,
    )
    what = f"draft {args.draft}, chain depth {args.depth}" if args.draft else "no draft (no speculation)"
    log.info("eyas reference engine (NOT SGLang): target %s, %s", args.model, what)
    return serve(ReferenceEngine(options), host=args.host, port=args.port)


def _limit_cpu_threads(requested: int) -> None:
    """Half the cores by default: the benchmark client shares the machine, and an oversubscribed torch on a
    loaded CPU was measured 10-30x slower than one thread (tiny models)."""
    import torch

    torch.set_num_threads(requested or max(1, (os.cpu_count() or 2) // 2))


if __name__ == "__main__":
    sys.exit(main())
