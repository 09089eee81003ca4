"""One measured round of a config beside the baseline, request by request.

The prompt set is sent in blocks of `concurrency` requests (all of a block in flight at once); each block
goes to both servers, one after the other, the side that goes first alternating from block to block and
from round to round (B S, S B, … then S B, B S, … in the next round). Each request's speculative run is
then paired with the same request's baseline run under the same load, seconds apart, so drift of the host
(clocks, thermals, a neighbour) hits both alike, and the paired speedup (paired_speedup.py) has one pair
per request per round rather than one per round.

Both servers' caches are flushed at the start of a round (a prompt is sent once per round to each, so no
request finds its own prompt cached); /server_info's acceptance is read at the round's end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from drafting.serving.benchmark import load_client
from drafting.serving.benchmark.bench_stats import summarize
from drafting.serving.benchmark.benchmarking import BenchmarkRun, Log, flush, server_accept_len
from drafting.serving.benchmark.load_client import LoadOptions, RequestRecord
from drafting.serving.prompts import Prompt

BASELINE, SPECULATIVE = "baseline", "speculative"


@dataclass
class _Side:
    url: str
    options: LoadOptions
    records: list[RequestRecord] = field(default_factory=list)
    wall_s: float = 0.0

    def run(self) -> BenchmarkRun:
        summary = summarize(self.records, self.wall_s)
        summary["server_accept_len"] = server_accept_len(self.url)
        return BenchmarkRun(summary, self.records)


@dataclass
class PairedRound:
    baseline: BenchmarkRun
    speculative: BenchmarkRun
    order: list[str]  # the first block's order
    blocks: list[dict[str, Any]]  # every block sent: side, block, requests, started_at, ended_at


def measure_paired_round(
    baseline: tuple[str, LoadOptions],
    speculative: tuple[str, LoadOptions],
    prompts: Sequence[Prompt],
    *,
    concurrency: int,
    round_index: int,
    log: Log,
    between_blocks: Callable[[], None] = lambda: None,
) -> PairedRound:
    """The round (see the module doc); `between_blocks` runs before each block is sent (a check that both
    servers are alive, a cancel check)."""
    sides = {
        BASELINE: _Side(baseline[0].rstrip("/"), replace(baseline[1], concurrency=concurrency)),
        SPECULATIVE: _Side(speculative[0].rstrip("/"), replace(speculative[1], concurrency=concurrency)),
    }
    for side in sides.values():
        flush(side.url, log)
    blocks: list[dict[str, Any]] = []
    orders: list[list[str]] = []
    for number, start in enumerate(range(0, len(prompts), concurrency)):
        block = prompts[start : start + concurrency]
        order = [BASELINE, SPECULATIVE] if (round_index + number) % 2 == 0 else [SPECULATIVE, BASELINE]
        orders.append(order)
        for name in order:
            between_blocks()
            side = sides[name]
            started = time.time()
            records, wall = load_client.run_load(side.url, block, side.options)
            for record in records:
                record.index += start
            side.records += records
            side.wall_s += wall
            blocks.append(
                {
                    "side": name,
                    "block": number,
                    "requests": len(block),
                    "started_at": started,
                    "ended_at": time.time(),
                }
            )
    return PairedRound(sides[BASELINE].run(), sides[SPECULATIVE].run(), orders[0] if orders else [], blocks)
