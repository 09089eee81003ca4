"""One torch thread per test process where tiny models run on the 2 shared cores (import the fixture into a
conftest to use it there)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny models on 2 shared cores: several torch threads per process thrash (measured 10-30x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
