"""Everything needed to continue a training run exactly where it stopped.

One file, `<output>/train_state.pt`, replaced atomically: the drafter's trainable weights in float32
(the served checkpoints are cast to the target's dtype, so they cannot seed an exact resume), d2t, the
optimizer and scheduler states, the RNG states, the position in the data (epoch, batches done in it,
optimizer step) and the fingerprint of what defines the run, so a resume with other data or another
schedule is refused.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from drafting.ml.drafter import Eagle3Drafter
from drafting.userfiles import Cap, check_regular

STATE_FILE = "train_state.pt"
STATE_FORMAT = 1


@dataclass
class RunPosition:
    epoch: int = 0  # epoch being trained (0-based)
    batch_in_epoch: int = 0  # batches of that epoch already trained
    global_step: int = 0  # optimizer steps so far


def trainable_state(drafter: Eagle3Drafter) -> dict[str, torch.Tensor]:
    return {
        name: tensor.detach().cpu().clone()
        for name, tensor in drafter.state_dict().items()
        if not name.startswith("embed_tokens.")
    }


def save_state(
    output: Path,
    *,
    drafter: Eagle3Drafter,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    position: RunPosition,
    fingerprint: dict[str, Any],
) -> Path:
    state = {
        "format": STATE_FORMAT,
        "fingerprint": fingerprint,
        "position": vars(position).copy(),
        "drafter": trainable_state(drafter),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": _rng_state(),
    }
    path = Path(output) / STATE_FILE
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_state(output: Path) -> dict[str, Any] | None:
    path = Path(output) / STATE_FILE
    if not os.path.lexists(path):
        return None
    check_regular(path, Cap.WEIGHTS, STATE_FILE)
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return state


def restore(
    state: dict[str, Any],
    *,
    drafter: Eagle3Drafter,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> RunPosition:
    drafter.load_state_dict(state["drafter"], strict=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    _set_rng_state(state["rng"])
    return RunPosition(**state["position"])


def _rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _set_rng_state(rng: dict[str, Any]) -> None:
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
