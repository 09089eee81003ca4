"""Planted numerics on the constructed successor target (cli.demo.constructed), shared by the divergence
tests of eval, of the smoke check and of the sweep.

- a near-tie: after TIED the target's top two logits are its successor and RIVAL, PLANTED_MARGIN apart;
- a rounding flip (`flipping`): the verify forward picks the runner-up wherever the top two are within
  FLIP_BELOW logits, as a bf16 kernel with another reduction order can;
- a lossy verify (`keep_every_draft`): every draft is kept without comparing it with the target's choice.

Both faults are planted in eyas's own decoder (drafting.serving.engine.decoding), not mocked: in the test's
process with `plant(kind, monkeypatch.setattr)`, in the reference engine's server processes with `in_servers`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from cli.demo.constructed import SPECIALS, successor, successor_target
from drafting.ml.drafter import Eagle3Drafter, default_aux_layers
from drafting.serving.engine import decoding

TIED = len(SPECIALS) + 5  # at this token the target's top two are its successor and RIVAL
RIVAL = len(SPECIALS) + 20
THIRD = len(SPECIALS) + 30  # in the three-way tie, PLANTED_MARGIN_THIRD below the successor after TIED
PLANTED_MARGIN = 0.1
PLANTED_MARGIN_THIRD = 0.15
FLIP_BELOW = 0.2
PLANT_ENV = "EYAS_TEST_DECODING_PLANT"
PLANT_DIR = Path(__file__).parent / "plant"  # its sitecustomize plants PLANT_ENV's fault in a server


def plant_near_tie(folder: Path, rivals: Sequence[tuple[int, float]] = ((RIVAL, PLANTED_MARGIN),)) -> Path:
    """Each rival raised to its margin in logits below the successor after TIED, in the target saved at
    folder."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[TIED]])).logits[0, -1]
        top = float(logits[successor(TIED)])
        direction = model.lm_head.weight[successor(TIED)] / top  # the successor's row scores TIED at `top`
        for rival, margin in rivals:
            model.lm_head.weight[rival] += direction * (top - margin - float(logits[rival]))
    model.save_pretrained(folder)
    return folder


def near_tie_target(folder: Path) -> Path:
    """The successor target with the planted near-tie, saved at folder."""
    return plant_near_tie(successor_target(folder))


def three_way_tie_target(folder: Path) -> Path:
    """The successor target where, after TIED, the successor, RIVAL and THIRD lie within PLANTED_MARGIN_THIRD
    logits (as three SmolLM2 tokens did within 0.003 on the H200), saved at folder."""
    rivals = ((RIVAL, PLANTED_MARGIN), (THIRD, PLANTED_MARGIN_THIRD))
    return plant_near_tie(successor_target(folder), rivals)


def random_drafter(config: dict[str, Any], embeddings: torch.Tensor | None = None) -> Eagle3Drafter:
    """An untrained drafter for the target of `config` (seeded): its drafts are mostly wrong."""
    torch.manual_seed(0)
    drafter = Eagle3Drafter.from_target_config(
        config, draft_vocab_size=int(config["vocab_size"]), aux_layer_ids=default_aux_layers(8)
    )
    if embeddings is not None:
        drafter.set_target_embeddings(embeddings)
    return drafter


def keep_every_draft(drafts: Sequence[int], choices: Sequence[int]) -> int:
    """The lossy verify: every draft accepted, whatever the target chose."""
    return len(drafts)


def flipping(forward: Callable[..., Any]) -> Callable[..., Any]:
    """The verify forward with the runner-up winning wherever the top two are within FLIP_BELOW logits."""

    def flipped(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        logits, aux = forward(*args, **kwargs)
        logits = logits.clone()
        values, indices = logits.topk(2, dim=-1)
        close = (values[:, 0] - values[:, 1]) < FLIP_BELOW
        rows = close.nonzero().flatten()
        logits[rows, indices[rows, 1]] = values[rows, 0] + 1.0  # the runner-up now wins
        return logits, aux

    return flipped


def plant(kind: str, set_attribute: Callable[[Any, str, Any], None] = setattr) -> None:
    """Plant `kind` ("flip" or "lossy") in drafting.serving.engine.decoding (in a test:
    monkeypatch.setattr)."""
    if kind == "lossy":
        set_attribute(decoding, "_matching_prefix", keep_every_draft)
    elif kind == "flip":
        set_attribute(decoding, "_forward_capturing", flipping(decoding._forward_capturing))
    else:
        raise ValueError(f"no plant named {kind!r}")


def in_servers(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Servers started from now on decode with `kind` planted ("lossy@3": only servers of depth 3): they
    inherit the test's environment, and PLANT_DIR first on PYTHONPATH makes their interpreter run its
    sitecustomize."""
    existing = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(PLANT_DIR), existing) if p))
    monkeypatch.setenv(PLANT_ENV, kind)
