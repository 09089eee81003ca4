"""Which epoch's checkpoint a training run hands on: the one with the highest simulated acceptance on the
held-out split (SpecForge keeps a `-best` by its simulated accept length the same way), or the last.

It reads the per-epoch summaries the run records in run.json, so a resumed run still weighs the epochs an
earlier job trained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Choice:
    epoch: int  # 1-based, as the epoch_{n} folders
    keep: Literal["best", "last"]
    best: dict[str, Any] | None  # {epoch, est_accept_len, depth}; None when no epoch was validated


def estimate(summary: dict[str, Any], depth: int) -> float | None:
    """An epoch's validation estimate at `depth`; from its cumulative accuracies when it predates the
    per-depth metric (1 + sum_{k<d} full_acc_k, the same value); None without validation."""
    named = summary.get(f"val/est_accept_len_d{depth}")
    if named is not None:
        return float(named)
    cumulative = [summary.get(f"val/full_acc_{k}") for k in range(depth)]
    if any(rate is None for rate in cumulative):
        return None
    return 1.0 + sum(float(rate) for rate in cumulative if rate is not None)


def choose(epochs: Sequence[dict[str, Any]], *, depth: int, keep: Literal["best", "last"]) -> Choice | None:
    """The chosen epoch among the recorded summaries (None before any epoch ended). Ties go to the later
    epoch, which has seen more data."""
    if not epochs:
        return None
    last = max(int(summary["epoch"]) for summary in epochs)
    scored = [(value, int(s["epoch"])) for s in epochs if (value := estimate(s, depth)) is not None]
    if not scored:
        return Choice(epoch=last, keep=keep, best=None)
    value, epoch = max(scored)
    best = {"epoch": epoch, "est_accept_len": value, "depth": depth}
    return Choice(epoch=epoch if keep == "best" else last, keep=keep, best=best)
