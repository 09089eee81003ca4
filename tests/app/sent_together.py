"""Requests sent to a live API process at the same moment, for races the API must settle."""

from __future__ import annotations

import threading
from typing import Any

import httpx


def sent_together(url: str, token: str, path: str, body: Any = None, count: int = 2) -> list[httpx.Response]:
    """`POST path` (with `body` as JSON) from `count` threads (a connection each), released together by a
    barrier."""
    gate = threading.Barrier(count)
    answers: list[httpx.Response] = []

    def one() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            http.get("/healthz")  # connected before the barrier, so the requests leave together
            gate.wait(timeout=10)
            answers.append(http.post(path, json=body))

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers
