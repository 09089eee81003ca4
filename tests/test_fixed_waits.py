"""No test sleeps a fixed time in the hope that something has happened by then. It polls with a deadline
(testsupport/timing.py: `eventually`, and `throughout` for a negative check over a period derived from a
setting) or moves a clock the product reads (`ManualClock`, create_app's `clock`).

A sleep passes inside a loop (the pause between two polls or tries) or where the wait itself is under test
(an outage's length, the moment of a kill, a stand-in server that hangs): its line says so with a comment
containing "under test".
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLEEPS = ("time.sleep", "asyncio.sleep", "sleep")
LOOPS = (ast.While, ast.For, ast.AsyncFor)


def fixed_sleeps(source: str) -> list[int]:
    """Line numbers of the sleeps outside any loop whose line does not say what about them is under test."""
    tree = ast.parse(source)
    looped = {id(inner) for loop in ast.walk(tree) if isinstance(loop, LOOPS) for inner in ast.walk(loop)}
    lines = source.splitlines()
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) in SLEEPS
        and id(node) not in looped
        and "under test" not in lines[node.lineno - 1]
    ]


def test_no_test_waits_a_fixed_time() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in ("tests", "testsupport")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in fixed_sleeps(path.read_text())
    ]
    assert not found, "fixed sleeps (poll with testsupport.timing.eventually instead):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import time\ntime.sleep(1.5)  # give the duplicates time to be consumed\n",
        "import time\ndef f(s):\n    time.sleep(s.heartbeat_s * 3)\n",
        "import asyncio\nasync def f():\n    await asyncio.sleep(0.4)\n",
        "from time import sleep\nwith open('x') as f:\n    sleep(1)\n",
        "import time\nwhile True:\n    def later():\n        pass\ntime.sleep(1)\n",  # after the loop
    ],
)
def test_a_fixed_sleep_is_caught(source: str) -> None:
    assert fixed_sleeps(source)


def test_pauses_between_polls_and_waits_under_test_pass() -> None:
    poll = "import time\nwhile not done():\n    time.sleep(0.1)\n"
    tries = "import time\nfor attempt in range(3):\n    time.sleep(0.1 * attempt)\n"
    outage = "import time\nstop()\ntime.sleep(1)  # the outage under test\nstart()\n"
    words = "import time\nprint('time.sleep(1)')\n"  # a sleep in a child's source string is no call here
    assert [fixed_sleeps(source) for source in (poll, tries, outage, words)] == [[], [], [], []]
