"""A raw Celery app on the same Redis, for the dispatch yardstick (round trip of a no-op task)."""

from __future__ import annotations

import sys

from celery import Celery

BROKER = sys.argv[sys.argv.index("--broker") + 1] if "--broker" in sys.argv else "redis://127.0.0.1:6379/0"
app = Celery("raw", broker="redis://127.0.0.1:6379/0", backend="redis://127.0.0.1:6379/1")
app.conf.update(task_default_queue="bench.raw", worker_prefetch_multiplier=1, task_acks_late=True)


@app.task(name="bench.noop")
def noop() -> int:
    return 1
