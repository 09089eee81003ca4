"""eval's decoder keeps the drafter's keys and values across steps: it must propose exactly the drafts the
full recompute (`draft_chain`, every position every step) proposes, so acceptance figures do not move."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from drafting.ml.drafter import Eagle3Drafter, aux_hidden_states, load_drafter
from drafting.serving.engine import decoding
from drafting.serving.engine.decoding import DecodeLimits, speculative_decode
from testsupport.tiny_pair import make_pair


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


def test_a_norm_output_draft_decodes_with_its_normed_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draft whose config sets `norm_output` (speculators' default; SGLang 0.5.12+ honours it) drafts from
    its normed output at every step after the first, in the cached decoder and the full recompute alike."""
    pair = make_pair(tmp_path, fit_steps=30, prompts=3)
    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    embed = target.get_input_embeddings().weight.detach()
    config = json.loads((pair.draft / "config.json").read_text())
    normed_dir = tmp_path / "normed"
    shutil.copytree(pair.draft, normed_dir)
    (normed_dir / "config.json").write_text(json.dumps({**config, "norm_output": True}))
    plain = load_drafter(pair.draft, target_embed=embed, device="cpu", dtype=torch.float32)
    normed = load_drafter(normed_dir, target_embed=embed, device="cpu", dtype=torch.float32)
    assert normed.norm_output
    assert not plain.norm_output

    def drafts(drafter: Eagle3Drafter) -> list[list[int]]:
        chains = []
        for prompt in pair.prompts:
            ids = torch.tensor([prompt])
            with torch.no_grad():
                features = drafter.project(aux_hidden_states(target, ids, aux_layers=drafter.aux_layers))
                pending = int(target(ids).logits[0, -1].argmax())
            chains.append(
                decoding.draft_chain_cached(drafter, decoding.DraftKV(), prompt, features, pending, 4)
            )
        return chains

    cached = drafts(normed)
    plain_drafts = drafts(plain)
    assert plain_drafts != cached  # the option changes the drafts after the first: the check bites
    assert [d[0] for d in plain_drafts] == [d[0] for d in cached]  # the first reads the target's states
    monkeypatch.setattr(decoding, "draft_chain_cached", _full_recompute)
    assert drafts(normed) == cached
