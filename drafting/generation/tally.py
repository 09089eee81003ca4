"""What a generate run did: records read, written, skipped and dropped (by reason, one example each),
requests, tokens, throughput and finish reasons."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from drafting.generation.client import Completion

EXAMPLE_CHARS = 200


@dataclass
class Tally:
    records_read: int = 0  # lines of the prompt set handled, usable or not
    prompts_finished: int = 0  # of those, settled: written, skipped, dropped
    written: int = 0
    skipped_done: int = 0  # already in the output (resume)
    truncated: int = 0  # written, with an answer that hit max_new_tokens
    self_attempts: int = 0
    self_written: int = 0
    self_openers: Counter[str] = field(default_factory=Counter)  # self-written turns kept, by opener
    dropped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    finish: Counter[str] = field(default_factory=Counter)
    first_request_at: float | None = None
    last_answer_at: float | None = None
    # Requests in flight over time, so a run shows whether `concurrency` was reached (a server that cannot
    # keep up shows as long requests at full concurrency, a starved one as fewer in flight)
    in_flight: int = 0
    in_flight_s: float = 0.0  # ∫ in_flight dt
    request_s: float = 0.0  # Σ request latencies
    ended: int = 0
    _changed_at: float | None = None

    def drop(self, reason: str, detail: str, *, where: str) -> None:
        self.dropped[reason] += 1
        self.examples.setdefault(reason, {"where": where, "detail": detail[:EXAMPLE_CHARS]})

    def request_started(self) -> float:
        now = time.monotonic()
        if self.first_request_at is None:
            self.first_request_at = now
        self._advance(now)
        self.in_flight += 1
        return now

    def request_ended(self, started: float) -> None:
        """A request settled, answered or not."""
        now = time.monotonic()
        self._advance(now)
        self.in_flight -= 1
        self.request_s += now - started
        self.ended += 1

    def _advance(self, now: float) -> None:
        if self._changed_at is not None:
            self.in_flight_s += self.in_flight * (now - self._changed_at)
        self._changed_at = now

    def answered(self, completion: Completion) -> None:
        self.requests += 1
        self.prompt_tokens += completion.prompt_tokens
        self.generated_tokens += completion.completion_tokens
        self.finish[completion.finish] += 1
        self.last_answer_at = time.monotonic()

    @property
    def generation_s(self) -> float:
        if self.first_request_at is None or self.last_answer_at is None:
            return 0.0
        return max(self.last_answer_at - self.first_request_at, 0.0)

    @property
    def tokens_per_s(self) -> float:
        seconds = self.generation_s
        return self.generated_tokens / seconds if seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": {
                "read": self.records_read,
                "written": self.written,
                "skipped_done": self.skipped_done,
                "truncated": self.truncated,
                "dropped": sum(self.dropped.values()),
            },
            "dropped": dict(sorted(self.dropped.items())),
            "drop_examples": dict(sorted(self.examples.items())),
            "self_prompts": {"attempts": self.self_attempts, "written": self.self_written}
            | ({"by_opener": dict(sorted(self.self_openers.items()))} if self.self_openers else {}),
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "generation_s": round(self.generation_s, 3),
            "tokens_per_s": round(self.tokens_per_s, 2),
            "mean_in_flight": round(self.in_flight_s / self.generation_s, 2) if self.generation_s else 0.0,
            "mean_request_s": round(self.request_s / self.ended, 3) if self.ended else 0.0,
            "finish_reasons": dict(sorted(self.finish.items())),
        }
