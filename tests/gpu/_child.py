"""A GPU test's work in a spawned child process: CUDA memory and the CUDA context go with the child, so the
test process never holds the GPU (a GPU gate run later in the same session would find it dirty)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def in_child(work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`work(*args, **kwargs)` in a fresh spawned process (`work` must be importable by its module name);
    its return value, or its exception raised here."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(work, *args, **kwargs).result()
