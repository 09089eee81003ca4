"""What tests/gpu/test_smoke_draft_dtype.py serves, built on the CPU: a constructed target, an EAGLE-3 draft
fitted to it, saved twice.

OUT/target             the constructed successor Llama (cli.demo.constructed), bf16, with its tokenizer
OUT/draft_speculators  the fitted draft re-saved through speculators' own classes (save_pretrained, bf16):
                       the layout a speculators-trained draft arrives in
OUT/draft_native       the same tensors saved by eyas in SGLang's native layout (`midlayer.*`, torch_dtype)

Sizes: target hidden 256, 8 layers, vocab 64 (~10 MiB bf16); draft ~2 MiB. `build(OUT)` returns what it
built and the acceptance the fitted draft reaches offline (torch, greedy, depth 3).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from cli.demo.constructed import successor_target
from drafting.ml.drafter import Eagle3Drafter, default_aux_layers, save_drafter
from drafting.serving.engine.decoding import DecodeLimits, greedy_decode, speculative_decode
from tests._drafts import speculators_model
from testsupport.tiny_pair import fit_drafter

HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, LAYERS = 256, 4, 2, 512, 8


def fitted_drafter(target: torch.nn.Module, config: dict[str, Any], steps: int) -> Eagle3Drafter:
    vocab = int(config["vocab_size"])
    torch.manual_seed(0)
    drafter = Eagle3Drafter.from_target_config(
        config, draft_vocab_size=vocab, aux_layer_ids=default_aux_layers(LAYERS)
    )
    drafter.set_target_embeddings(target.get_input_embeddings().weight.detach())
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab, (12,), generator=generator).tolist() for _ in range(16)]
    sequences = [p + greedy_decode(target, p, DecodeLimits(48)).output_ids for p in prompts]
    fit_drafter(target, drafter, sequences, steps=steps)
    return drafter


def offline_acceptance(target: torch.nn.Module, drafter: Eagle3Drafter, vocab: int) -> float:
    generator = torch.Generator().manual_seed(9)
    tokens = verify = 0
    for _ in range(4):
        prompt = torch.randint(0, vocab, (10,), generator=generator).tolist()
        result = speculative_decode(target, drafter, prompt, DecodeLimits(64), 3)
        tokens, verify = tokens + len(result.output_ids), verify + result.verify_ct
    return round(tokens / verify, 3)


def save_as_speculators(
    drafter: Eagle3Drafter, target: torch.nn.Module, config: dict[str, Any], folder: Path
) -> None:
    """The fitted tensors in speculators' own Eagle3DraftModel, saved by its save_pretrained in bf16."""
    from transformers import LlamaConfig

    layer = LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        num_hidden_layers=1,
        vocab_size=int(config["vocab_size"]),
        max_position_embeddings=int(config["max_position_embeddings"]),
        rms_norm_eps=float(config["rms_norm_eps"]),
        rope_parameters=config.get("rope_parameters"),
    )
    # HF aux layer indices are speculators' convention; SGLang's layer keeps the un-normed residual
    model = speculators_model(
        layer, int(config["vocab_size"]), default_aux_layers(LAYERS), norm_before_residual=False
    )
    ours = drafter.state_dict()
    state = {name.replace("midlayer.", "layers.0."): value for name, value in ours.items() if name != "d2t"}
    state["verifier_lm_head.weight"] = target.lm_head.weight.detach()
    state["verifier_norm.weight"] = target.model.norm.weight.detach()
    missing, unexpected = model.load_state_dict(state, strict=False)
    left = [m for m in missing if m not in ("d2t", "t2d")]
    if left or unexpected:
        raise AssertionError(f"speculators layout mismatch: missing {left}, unexpected {unexpected}")
    model.load_vocab_mappings(drafter.t2d, drafter.d2t)
    model.to(torch.bfloat16).save_pretrained(folder)


def build(out: Path, steps: int = 300) -> dict[str, Any]:
    torch.set_num_threads(4)
    target_dir = successor_target(
        out / "target", hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, intermediate=INTERMEDIATE,
        layers=LAYERS, dtype=torch.bfloat16,
    )  # fmt: skip
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    config = json.loads((target_dir / "config.json").read_text())
    drafter = fitted_drafter(target, config, steps).eval()
    save_drafter(drafter, out / "draft_native", target_config=config)
    save_as_speculators(drafter, target, config, out / "draft_speculators")
    return {
        "target": target_dir,
        "offline_accept_length_depth3": offline_acceptance(target, drafter, int(config["vocab_size"])),
    }
