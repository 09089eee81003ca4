"""Time in the tests: wait for a condition with a deadline instead of sleeping, watch that one keeps holding,
or move a clock the product reads by hand."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], *, within_s: float, what: str, every_s: float = 0.05) -> T:
    """Ask `check()` until it answers something truthy and return that answer; fail naming `what` once
    `within_s` seconds have passed. The pause between asks only bounds how often it asks."""
    deadline = time.monotonic() + within_s
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {within_s:g} s (last answer: {answer!r})")
        time.sleep(min(every_s, max(0.0, deadline - time.monotonic())))


def throughout(check: Callable[[], object], *, for_s: float, what: str, every_s: float = 0.05) -> None:
    """A negative check: `check()` stays truthy for `for_s` seconds, asked every `every_s`; fails at the first
    falsy answer. The caller states why `for_s` is long enough (a multiple of the setting that governs it)."""
    deadline = time.monotonic() + for_s
    while True:
        assert check(), f"{what}: stopped holding"
        if time.monotonic() >= deadline:
            return
        time.sleep(min(every_s, max(0.0, deadline - time.monotonic())))


class ManualClock:
    """Monotonic seconds that move only when `advance` is called: given where the product takes a clock
    (create_app's `clock`), a test sees a cache period end without waiting for it."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
