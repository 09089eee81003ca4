"""The train stage's run file (run.json: params and one line per finished epoch) and its result, with the
checkpoint the run hands on (chosen from run.json's epochs, so a resumed job weighs the ones earlier jobs
trained)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from contract.params.train import TrainParams
from drafting.context import StageContext
from drafting.ml.checkpoint_choice import choose
from drafting.ml.drafter import Eagle3Drafter
from drafting.ml.objective import ACCEPT_FORMULA
from drafting.ml.simulated_acceptance import SIMULATED_FORMULA
from drafting.ml.train_state import RunPosition
from drafting.userfiles import Cap, read_user_json_object

RUN_FILE = "run.json"


def record_epoch(output: Path, params: dict[str, Any], summary: dict[str, float]) -> None:
    """Add an epoch to the run's record (`params` as the user gave them: views replaced by their paths)."""
    path = output / RUN_FILE
    record = read_run(output) or {"params": params, "epochs": []}
    epochs: list[dict[str, float]] = record["epochs"]
    record["epochs"] = [e for e in epochs if e.get("epoch") != summary["epoch"]] + [summary]
    path.write_text(json.dumps(record, indent=2) + "\n")


def read_run(output: Path) -> dict[str, Any] | None:
    path = output / RUN_FILE
    return read_user_json_object(path, Cap.CONFIG, RUN_FILE) if os.path.lexists(path) else None


def train_result(
    ctx: StageContext,
    output: Path,
    position: RunPosition,
    params: TrainParams,
    drafter: Eagle3Drafter,
    *,
    total_steps: int,
) -> dict[str, Any]:
    last = output / f"epoch_{position.epoch}" if position.epoch else None
    record = read_run(output) or {"epochs": []}
    completed = position.epoch >= params.epochs
    # A max_steps stop ends the job but not the planned run: its progress is the share of planned steps done,
    # so a dashboard does not show a partial run as complete (resuming with a larger max_steps continues it).
    stopped = (
        f"stopped at max_steps={params.max_steps}: {position.global_step} of {total_steps} planned steps"
    )
    ctx.progress(
        1.0 if completed else min(1.0, position.global_step / max(1, total_steps)),
        "done" if completed else stopped,
    )
    report = {
        "completed": completed,
        "total_steps": total_steps,
        "output": str(output),
        "checkpoint": str(last) if last else None,
        "epochs_done": position.epoch,
        "global_step": position.global_step,
        "draft_vocab_size": params.draft_vocab_size,
        "aux_layers": drafter.aux_layers,
        "epochs": record["epochs"],
        **_hand_on(ctx, output, params, record["epochs"]),
        "accept_formula": ACCEPT_FORMULA,  # est_accept_len_d{d}: per position, overstates serving
        "simulated_formula": SIMULATED_FORMULA,  # sim_accept_len_d{d}: epochs are chosen by it
    }
    described: dict[str, Any] = ctx.paths.describe_all(report)  # the output folder by the user's path
    return described


def _hand_on(
    ctx: StageContext, output: Path, params: TrainParams, epochs: list[dict[str, Any]]
) -> dict[str, Any]:
    """The checkpoint the run hands on, as its own artifact kind (a pipeline's fix_keys reads it), and the
    result's fields about it. Recorded at the end of every call, so a resumed or retried job names it too,
    with the epochs earlier jobs trained weighed (run.json keeps them)."""
    choice = choose(epochs, depth=params.choice_depth, keep=params.keep)
    if choice is None:
        return {"best": None, "keep": params.keep, "selected": None}
    best = choice.best and {**choice.best, "checkpoint": str(output / f"epoch_{choice.best['epoch']}")}
    selected = output / f"epoch_{choice.epoch}"
    ctx.artifact("best_drafter", selected, {"epoch": choice.epoch, "keep": choice.keep, "best": best})
    return {"best": best, "keep": params.keep, "selected": str(selected)}
