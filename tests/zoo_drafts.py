"""Drafts eyas trains for the zoo's targets, as its train stage saves them (random weights: the checks here
read configs and tensor names, not what the draft predicts)."""

from __future__ import annotations

import json
from pathlib import Path

from drafting.ml._config import default_aux_layers, text_config
from drafting.ml.drafter import Eagle3Drafter, save_drafter
from drafting.support_matrix import CaptureKind, support_for

DRAFT_VOCAB = 32


def zoo_draft(target: Path, dest: Path, *, release: str, layers: list[int] | None = None) -> Path:
    """An eyas draft for `target`, with the ids and capture of SGLang `release` (default layers [2, N//2,
    N-3])."""
    config = json.loads((target / "config.json").read_text())
    support = support_for(config, release)
    kind = support.captures if support is not None and support.captures else CaptureKind.RESIDUAL_STREAM
    drafter = Eagle3Drafter.from_target_config(
        config,
        draft_vocab_size=DRAFT_VOCAB,
        aux_layer_ids=layers or default_aux_layers(int(text_config(config)["num_hidden_layers"])),
        aux_capture=kind,
        sglang_version=release,
    )
    save_drafter(drafter, dest, target_config=config)
    return dest
