"""Inputs for bench/gpu/smoke_fault1.py, built HERE (CPU, .venv with speculators) and carried to the GPU host.

    .venv/bin/python bench/gpu/make_fault1_inputs.py OUT [--steps 300]

OUT/target             the constructed successor Llama (drafting.ml.demo_assets), bf16, with its tokenizer
OUT/draft_speculators  an EAGLE-3 draft fitted to it on the CPU, re-saved through speculators' classes
                       (save_pretrained, bf16): the layout a speculators-trained draft arrives in
OUT/draft_native       the same tensors saved by eyas in SGLang's native layout (`midlayer.*`, torch_dtype)
OUT/inputs.json        what was built, with the acceptance the fitted draft reaches offline (torch, greedy)

Sizes: target hidden 256, 8 layers, vocab 64 (~10 MiB bf16); draft ~2 MiB. Prints OUT/inputs.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from drafting.ml.demo_assets import WORDS, successor_target  # noqa: E402
from drafting.ml.drafter import Eagle3Drafter, default_aux_layers, save_drafter  # noqa: E402
from drafting.serving.decoding import DecodeLimits, greedy_decode, speculative_decode  # noqa: E402
from testsupport.tiny_pair import fit_drafter  # noqa: E402

HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, LAYERS = 256, 4, 2, 512, 8


def fitted_drafter(target: torch.nn.Module, config: dict, steps: int) -> Eagle3Drafter:
    vocab = int(config["vocab_size"])
    torch.manual_seed(0)
    drafter = Eagle3Drafter.from_target_config(
        config, draft_vocab_size=vocab, aux_layer_ids=default_aux_layers(LAYERS)
    )
    drafter.set_target_embeddings(target.get_input_embeddings().weight.detach())
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab, (12,), generator=generator).tolist() for _ in range(16)]
    sequences = [p + greedy_decode(target, p, DecodeLimits(48)).output_ids for p in prompts]
    loss = fit_drafter(target, drafter, sequences, steps=steps)
    print(f"fitted {steps} steps, last loss {loss:.4f}", file=sys.stderr)
    return drafter


def offline_acceptance(target: torch.nn.Module, drafter: Eagle3Drafter, vocab: int) -> float:
    generator = torch.Generator().manual_seed(9)
    tokens = verify = 0
    for _ in range(4):
        prompt = torch.randint(0, vocab, (10,), generator=generator).tolist()
        result = speculative_decode(target, drafter, prompt, DecodeLimits(64), 3)
        tokens, verify = tokens + len(result.output_ids), verify + result.verify_ct
    return round(tokens / verify, 3)


def save_as_speculators(drafter: Eagle3Drafter, target: torch.nn.Module, config: dict, folder: Path) -> None:
    """The fitted tensors in speculators' own Eagle3DraftModel, saved by its save_pretrained in bf16."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from speculators.config import SpeculatorsConfig, VerifierConfig
        from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
        from speculators.proposals.greedy import GreedyTokenProposalConfig
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
    spec_config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=int(config["vocab_size"]),
        norm_before_residual=False,  # SGLang's layer: the residual is the un-normed hidden state
        eagle_aux_hidden_state_layer_ids=default_aux_layers(LAYERS),  # HF indices, speculators' convention
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
        ),
    )
    model = Eagle3DraftModel(spec_config)
    ours = drafter.state_dict()
    state = {name.replace("midlayer.", "layers.0."): value for name, value in ours.items() if name != "d2t"}
    state["verifier_lm_head.weight"] = target.lm_head.weight.detach()
    state["verifier_norm.weight"] = target.model.norm.weight.detach()
    missing, unexpected = model.load_state_dict(state, strict=False)
    left = [m for m in missing if m not in ("d2t", "t2d")]
    if left or unexpected:
        raise SystemExit(f"speculators layout mismatch: missing {left}, unexpected {unexpected}")
    model.load_vocab_mappings(drafter.t2d, drafter.d2t)
    model.to(torch.bfloat16).save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    target_dir = successor_target(
        out / "target",
        hidden=HIDDEN,
        heads=HEADS,
        kv_heads=KV_HEADS,
        intermediate=INTERMEDIATE,
        layers=LAYERS,
        dtype=torch.bfloat16,
    )
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    config = json.loads((target_dir / "config.json").read_text())
    drafter = fitted_drafter(target, config, args.steps).eval()
    save_drafter(drafter, out / "draft_native", target_config=config)
    save_as_speculators(drafter, target, config, out / "draft_speculators")
    sizes = {
        p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        for p in out.iterdir()
        if p.is_dir()
    }
    info = {
        "target": str(target_dir),
        "words": len(WORDS),
        "offline_accept_length_depth3": offline_acceptance(target, drafter, int(config["vocab_size"])),
        "bytes": sizes,
    }
    (out / "inputs.json").write_text(json.dumps(info, indent=2))
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
