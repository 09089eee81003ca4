"""A speculators EAGLE-3 draft large enough (~150 MB) that a converter killed at a random moment is often
caught in the middle of writing."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

HIDDEN, INTER, HEADS, KV_HEADS = 512, 2048, 8, 2
VOCAB, DRAFT_VOCAB = 32_000, 8_000


def write_speculators_draft(folder: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from speculators.config import SpeculatorsConfig, VerifierConfig
        from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
        from speculators.proposals.greedy import GreedyTokenProposalConfig
        from transformers import LlamaConfig

    layer = LlamaConfig(
        hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        num_hidden_layers=1, vocab_size=VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-5,
    )  # fmt: skip
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=DRAFT_VOCAB,
        eagle_aux_hidden_state_layer_ids=[1, 4, 6],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
        ),
    )
    model = Eagle3DraftModel(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.02)
    used = torch.arange(0, 2 * DRAFT_VOCAB, 2)
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[used] = True
    model.load_vocab_mappings(t2d, used - torch.arange(DRAFT_VOCAB))
    model.save_pretrained(folder)
    return folder
