"""Fixtures of the reliability suite, and the rule that keeps its long variants out of the default run.

`@pytest.mark.slow` tests here run only when the -m expression names `slow`
(`bash scripts/test.sh -m slow tests/reliability`); the default run keeps the small variants.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability._stack import Stack, private_stack

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="long variant: run with -m slow")
    for item in items:
        if item.get_closest_marker("slow") and HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A private eyas (own PostgreSQL, Redis, API, workers) that the test may break and restart."""
    with private_stack(tmp_path) as private:
        yield private
