"""speculators EAGLE-3 drafters saved by speculators' own save_pretrained, at any size.

tests/checkpoint builds a tiny one (hidden 32) for the converter and the doctor; tests/reliability a ~150 MB
one, large enough that a converter killed at a random moment is often caught writing. The key names, dtypes
and config layout are the library's, not ours.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class DraftShape:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    draft_vocab: int
    max_positions: int


def layer_config(shape: DraftShape) -> Any:
    """The draft's one decoder layer, as a transformers LlamaConfig."""
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        num_hidden_layers=1,
        vocab_size=shape.vocab,
        max_position_embeddings=shape.max_positions,
        rms_norm_eps=1e-5,
    )


def vocab_map(shape: DraftShape) -> tuple[torch.Tensor, torch.Tensor]:
    """d2t/t2d as all three trainers build them: the used target ids, sorted, as offsets."""
    used = torch.arange(0, 2 * shape.draft_vocab, 2)  # every other target token
    d2t = used - torch.arange(shape.draft_vocab)
    t2d = torch.zeros(shape.vocab, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


def fill_finite(model: torch.nn.Module) -> None:
    """speculators initialises lm_head/embeddings to NaN until verifier weights load; give them values."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.02)


def speculators_model(layer: Any, draft_vocab: int, aux_layer_ids: list[int], **options: Any) -> Any:
    """speculators' own Eagle3DraftModel of one `layer` (a LlamaConfig), greedy proposals of 3 tokens, a
    Llama verifier; `options` go to Eagle3SpeculatorConfig (e.g. norm_before_residual)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from speculators.config import SpeculatorsConfig, VerifierConfig
        from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
        from speculators.proposals.greedy import GreedyTokenProposalConfig

    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=draft_vocab,
        eagle_aux_hidden_state_layer_ids=aux_layer_ids,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
        ),
        **options,
    )
    return Eagle3DraftModel(config)


def write_speculators_draft(folder: Path, shape: DraftShape, dtype: torch.dtype = torch.float32) -> Path:
    """An Eagle3DraftModel in `dtype`, saved into folder by speculators' save_pretrained.

    The aux layer ids are in speculators' convention; the dtype lands where speculators puts it, at the
    top level of its config (transformer_layer_config carries none)."""
    model = speculators_model(layer_config(shape), shape.draft_vocab, [1, 4, 6])
    fill_finite(model)
    d2t, t2d = vocab_map(shape)
    model.load_vocab_mappings(t2d, d2t)
    torch.nn.Module.to(model, dtype)  # transformers types its .to() override for models only
    model.save_pretrained(folder)
    return folder
