"""eval's decoder keeps the drafter's keys and values across steps: it must propose exactly the drafts the
full recompute (`draft_chain`, every position every step) proposes, so acceptance figures do not move."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from drafting.ml.drafter import load_drafter
from drafting.serving import decoding
from drafting.serving.decoding import DecodeLimits, speculative_decode
from tests.serving.serving_tiny_models import make_pair


def _full_recompute(drafter, kv, context, features, pending, depth):  # type: ignore[no-untyped-def]
    return decoding.draft_chain(drafter, context, features, pending, depth)


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_cached_drafts_equal_the_full_recompute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, depth: int
) -> None:
    pair = make_pair(tmp_path, fit_steps=30, prompts=3)  # a fitted drafter: drafts get accepted, runs vary
    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    embed = target.get_input_embeddings().weight.detach()
    drafter = load_drafter(pair.draft, target_embed=embed, device="cpu", dtype=torch.float32)
    cached = [speculative_decode(target, drafter, p, DecodeLimits(40), depth) for p in pair.prompts]
    monkeypatch.setattr(decoding, "draft_chain_cached", _full_recompute)
    full = [speculative_decode(target, drafter, p, DecodeLimits(40), depth) for p in pair.prompts]
    assert [r.accepted_drafts for r in cached] == [r.accepted_drafts for r in full]
    assert [r.output_ids for r in cached] == [r.output_ids for r in full]
    assert sum(sum(r.accepted_drafts) for r in cached) > 0  # the comparison covered accepted drafts
