"""Daemon threads kept between uses, for work each job needs a thread of its own for (its heartbeat).

`threading.Thread.start()` returns only once the new thread runs, and on a busy host that wait is
milliseconds, paid on a job's way to `running`. A kept thread that is idle takes the work at once (the caller
only queues it); a new thread starts only when none is idle, so there are as many as were ever busy at once.
Each piece of work still has a thread to itself for as long as it runs.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger("eyas.threads")


class KeptThreads:
    def __init__(self, name: str) -> None:
        self._name = name
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0

    def run(self, work: Callable[[], None]) -> None:
        """Run `work` on a thread of its own: an idle kept one, else a new one. Returns at once."""
        with self._lock:
            start = self._idle == 0
            if start:
                self._count += 1
            else:
                self._idle -= 1  # that thread is spoken for
        self._work.put(work)
        if start:
            threading.Thread(target=self._serve, name=f"{self._name}-{self._count}", daemon=True).start()

    def _serve(self) -> None:
        while True:
            work = self._work.get()
            try:
                work()
            except Exception:  # a thread kept for others must survive what one piece of work raised
                logger.exception("%s: work failed", self._name)
            with self._lock:
                self._idle += 1
