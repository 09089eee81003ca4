"""The reference engine's counters and its SGLang-format `Decode batch` log line."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from drafting.serving.engine.decoding import DecodeResult

log = logging.getLogger("eyas.reference_engine")


@dataclass
class SpecCounters:
    """Lifetime counters since start or the last /flush_cache, as SGLang's scheduler keeps them."""

    requests: int = 0
    completion_tokens: int = 0
    verify_ct: int = 0
    accept_tokens: int = 0  # Σ (accepted drafts + 1) per verify step: SGLang's spec_total_num_accept_tokens
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    last_gen_throughput: float = 0.0

    def add(self, result: DecodeResult) -> None:
        self.requests += 1
        self.completion_tokens += len(result.output_ids)
        self.verify_ct += result.verify_ct
        self.accepted_drafts += sum(result.accepted_drafts)
        self.accept_tokens += sum(result.accepted_drafts) + result.verify_ct
        self.proposed_drafts += result.verify_ct * result.depth

    @property
    def avg_accept_length(self) -> float | None:
        return self.accept_tokens / self.verify_ct if self.verify_ct else None


class DecodeBatchLog:
    """Logs `Decode batch, …` every `interval` decode iterations (a verify step, or one plain decode step)."""

    def __init__(self, interval: int, depth: int, counters: SpecCounters) -> None:
        self.interval, self.depth, self.counters = interval, depth, counters
        self._reset()

    def _reset(self) -> None:
        self.iterations = 0
        self.tokens = 0
        self.accepted = 0
        self.started = time.monotonic()

    def step(self, tokens_added: int, *, cached_tokens: int, queued: int) -> None:
        self.iterations += 1
        self.tokens += tokens_added
        self.accepted += max(0, tokens_added - 1)
        if self.iterations >= self.interval:
            self._emit(cached_tokens, queued)
            self._reset()

    def _emit(self, cached_tokens: int, queued: int) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        throughput = self.tokens / elapsed
        self.counters.last_gen_throughput = throughput
        spec = ""
        if self.depth:
            accept_len = self.tokens / self.iterations
            accept_rate = self.accepted / (self.iterations * self.depth)
            spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
        log.info(
            "Decode batch, #running-req: 1, #token: %d, token usage: 0.00, %scuda graph: False, "
            "gen throughput (token/s): %.2f, #queue-req: %d",
            cached_tokens,
            spec,
            throughput,
            queued,
        )
