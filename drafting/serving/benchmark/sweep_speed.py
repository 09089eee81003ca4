"""What a sweep says about speed across concurrencies: each config's paired speedup at each, and where
speculation stops paying.

A config is measured at every concurrency of the sweep (`concurrencies`, e.g. 1, 8 and 32 requests in flight).
At each, its speedup is the paired one (drafting/serving/benchmark/paired_speedup.py) and it `pays` when the
whole 95 % interval is above 1, does not when the whole interval is below 1, and is unclear otherwise;
`stops_paying_at` is the lowest concurrency at which it no longer clearly pays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def level_entry(row_fields: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """One concurrency of a config's `by_concurrency` list, from that level's row fields."""
    keys = (
        "speedup",
        "speedup_ci_low",
        "speedup_ci_high",
        "speedup_half_width",
        "speedup_n",
        "speedup_pairs",
        "baseline_tok_s",
        "output_tok_s",
        "accept_len",
        "itl_p50_ms",
    )
    entry = {"concurrency": concurrency, **{key: row_fields.get(key) for key in keys}}
    entry["pays"] = pays(entry.get("speedup_ci_low"), entry.get("speedup_ci_high"))
    return entry


def pays(low: float | None, high: float | None, threshold: float = 1.0) -> str:
    if low is None or high is None:
        return "unknown"
    if low > threshold:
        return "yes"
    if high < threshold:
        return "no"
    return "unclear"


def stops_paying_at(levels: Sequence[dict[str, Any]]) -> int | None:
    """The lowest concurrency at which the config no longer clearly pays (None: it pays at every one)."""
    for entry in sorted(levels, key=lambda e: e["concurrency"]):
        if entry["pays"] != "yes":
            return int(entry["concurrency"])
    return None


def concurrency_summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per measured config that has levels: its speedup at each concurrency and where it stops
    paying (what the result's `by_concurrency` says, for the log and the verdict)."""
    lines = []
    for row in rows:
        levels = row.get("by_concurrency") or []
        if row.get("config") is None or not levels:
            continue
        parts = [
            f"{e['concurrency']}: {e['speedup']}x "
            f"({e['speedup_ci_low']}–{e['speedup_ci_high']}, pays {e['pays']})"
            for e in levels
        ]
        where = row.get("stops_paying_at")
        end = "pays at every concurrency measured" if where is None else f"stops paying at {where}"
        lines.append(f"{row['label']}: " + "; ".join(parts) + f"; {end}")
    return lines
