"""Which epoch's checkpoint a training run hands on: the one with the highest simulated acceptance (SpecForge
keeps a `-best` by its simulated accept length the same way), or the last.

The estimate comes from the held-out extraction (`held_out/...`, prompts kept out of training) when the run
validated on one, else from the split of the training data (`val/...`). It reads the per-epoch summaries the
run records in run.json, so a resumed run still weighs the epochs an earlier job trained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

# Metric prefixes an estimate may come from, in order of preference: prompts kept out of training say more
# about serving than a split that shares the training prompts' style (docs/training.md).
SOURCES = ("held_out", "val")


@dataclass(frozen=True)
class Choice:
    epoch: int  # 1-based, as the epoch_{n} folders
    keep: Literal["best", "last"]
    # {epoch, est_accept_len (the value), depth, source, metric (which one)}; None when no epoch was validated
    best: dict[str, Any] | None


def named_estimate(summary: dict[str, Any], depth: int, source: str = "val") -> tuple[float, str] | None:
    """(value, metric) of an epoch's acceptance at `depth` on `source`: the simulated one (serving replayed
    cycle by cycle, simulated_acceptance.py) when the run recorded it; else the per-position estimate,
    from the cumulative accuracies when it predates the per-depth metric (1 + sum_{k<d} full_acc_k, the same
    value); None without that validation. Within one run every epoch has the same kind."""
    for metric in (f"sim_accept_len_d{depth}", f"est_accept_len_d{depth}"):
        if (named := summary.get(f"{source}/{metric}")) is not None:
            return float(named), metric
    cumulative = [summary.get(f"{source}/full_acc_{k}") for k in range(depth)]
    if any(rate is None for rate in cumulative):
        return None
    return 1.0 + sum(float(rate) for rate in cumulative if rate is not None), f"est_accept_len_d{depth}"


def choose(epochs: Sequence[dict[str, Any]], *, depth: int, keep: Literal["best", "last"]) -> Choice | None:
    """The chosen epoch among the recorded summaries (None before any epoch ended), by the first source of
    SOURCES that scored any epoch. Ties go to the later epoch, which has seen more data."""
    if not epochs:
        return None
    last = max(int(summary["epoch"]) for summary in epochs)
    for source in SOURCES:
        scored = [
            (found[0], int(s["epoch"]), found[1])
            for s in epochs
            if (found := named_estimate(s, depth, source)) is not None
        ]
        if scored:
            value, epoch, metric = max(scored)
            best = {
                "epoch": epoch,
                "accept_len": value,  # the value of `metric`
                "depth": depth,
                "source": source,
                "metric": metric,
            }
            return Choice(epoch=epoch if keep == "best" else last, keep=keep, best=best)
    return Choice(epoch=last, keep=keep, best=None)
