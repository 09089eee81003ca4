"""Registers each domain's result recorder (app/jobs/results.py) by job kind.

Called once at start-up, by create_app and by the worker's build, so that the shared finishing path in
app/jobs/lifecycle.py names no kind and nothing registers itself as a side effect of being imported.
"""

from __future__ import annotations

from app.benchmarks import service as benchmarks
from app.jobs import results


def register_result_recorders() -> None:
    """Idempotent: registering a kind again replaces its recorder with the same one."""
    results.register("benchmark", benchmarks.record_benchmark_job)
