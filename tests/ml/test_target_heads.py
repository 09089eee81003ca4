"""The trainer's target distribution against each zoo target's own (testsupport/target_zoo.py), and the text
model eyas loads from wrapped checkpoints against the wrapper's own.

The reference for every target is the text model transformers builds from the checkpoint, run whole:
its logits' softmax at each position, and its final norm's input as the stored last state. The trainer's
head (load_target_head) must give the same distribution: argmax agreement 1.0, total variation < 1e-3.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaForConditionalGeneration,
)
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from drafting.ml.target_head import TargetHead, load_target_head, stored_head_names
from drafting.ml.text_model import TargetModelError, load_text_model, text_model_spec
from testsupport.target_zoo import SERVED, SGLANG_SIZES, VOCAB, ZOO, build

# The text model of each wrapper, built here by hand from its own config and the names its checkpoint keeps
# (independent of how eyas finds them): class, config class, checkpoint prefix -> text-model prefix.
WRAPPED: dict[str, tuple[Any, Any, dict[str, str]]] = {
    "gemma3_multimodal": (Gemma3ForCausalLM, Gemma3TextConfig, {r"^language_model\.model\.": "model."}),
    "kimi_k25": (
        DeepseekV3ForCausalLM,
        DeepseekV3Config,
        {r"^language_model\.model\.": "model.", r"^language_model\.lm_head\.": "lm_head."},
    ),
    "llava": (
        LlamaForCausalLM,
        LlamaConfig,
        {r"^language_model\.model\.": "model.", r"^language_model\.lm_head\.": "lm_head."},
    ),
}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("zoo")
    return {name: build(name, root / name) for name in ZOO}


def reference_model(folder: Path, name: str) -> Any:
    """The target's text model as transformers builds it, without eyas's loader."""
    if name not in WRAPPED:
        return AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=False).eval()
    model_class, config_class, mapping = WRAPPED[name]
    fields = json.loads((folder / "config.json").read_text())["text_config"]
    config = config_class(**{k: v for k, v in fields.items() if k not in ("model_type", "architectures")})
    return model_class.from_pretrained(str(folder), config=config, key_mapping=mapping).eval()


def own_distribution(model: Any, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax of the model's own logits [B, S, V], its final norm's input [B, S, T])."""
    seen: dict[str, torch.Tensor] = {}
    norm = model.get_decoder().norm
    handle = norm.register_forward_pre_hook(lambda _module, args: seen.update(last=args[0]))
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits
    finally:
        handle.remove()
    return logits.float().softmax(-1), seen["last"]


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    return float(0.5 * (p.float() - q.float()).abs().sum(-1).max())


@pytest.mark.parametrize("name", list(ZOO))
def test_the_target_distribution_is_the_models_own_softmax(zoo: dict[str, Path], name: str) -> None:
    ids = torch.randint(4, 47, (2, 24), generator=torch.Generator().manual_seed(1))
    probs, last = own_distribution(reference_model(zoo[name], name), ids)
    head = load_target_head(zoo[name])
    every_id = torch.arange(VOCAB)
    mine, argmax = head.distribution(last, every_id)
    assert (argmax == probs.argmax(-1)).float().mean().item() == 1.0
    assert total_variation(mine, probs) < 1e-3
    # the draft-vocab path (later epochs, argmax_cache.py): the same logits on a subset of rows
    draft_ids = torch.arange(4, 40)
    subset = probs[..., draft_ids] / probs[..., draft_ids].sum(-1, keepdim=True)
    assert total_variation(head.draft_distribution(last, head.lm_head[draft_ids]), subset) < 1e-3


def test_a_reimplemented_final_norm_is_caught_on_gemma3(zoo: dict[str, Path]) -> None:
    """The matrix above bites: Gemma's norm scales by (1 + w), a Llama RMS norm by w (what eyas's head
    applied before it took the model's own), and the softcap is left out; the distribution moves far."""
    probs, last = own_distribution(
        reference_model(zoo["gemma3_text"], "gemma3_text"), torch.tensor([[5, 9, 13, 20]])
    )
    own = load_target_head(zoo["gemma3_text"])
    weight = own.final_norm.weight.detach()
    norm = LlamaRMSNorm(weight.numel(), eps=1e-6)
    norm.weight.data.copy_(weight)
    rebuilt = TargetHead(own.embed, own.lm_head, norm)
    assert total_variation(rebuilt.distribution(last, torch.arange(VOCAB))[0], probs) > 0.05


@pytest.mark.parametrize("name", list(WRAPPED))
def test_a_wrapped_checkpoint_loads_its_text_model_alone(zoo: dict[str, Path], name: str) -> None:
    spec = text_model_spec(zoo[name])
    loaded = load_text_model(zoo[name], dtype=torch.float32)
    assert type(loaded) is WRAPPED[name][0]
    assert spec.checkpoint_name("model.norm.weight") == "language_model.model.norm.weight"
    ids = torch.tensor([[2, 7, 9, 11, 13, 3, 8, 20]])
    with torch.no_grad():
        mine = loaded(input_ids=ids, output_hidden_states=True).hidden_states
        if name == "llava":  # the wrapper's own states on text alone
            theirs = LlavaForConditionalGeneration.from_pretrained(str(zoo[name])).eval()(
                input_ids=ids, output_hidden_states=True
            )
            reference = theirs.hidden_states
        else:
            reference = reference_model(zoo[name], name)(
                input_ids=ids, output_hidden_states=True
            ).hidden_states
    assert len(mine) == len(reference) == 9
    for own, other in zip(mine, reference, strict=True):
        torch.testing.assert_close(own, other)


def test_gemma3_multimodal_states_are_its_language_models(zoo: dict[str, Path]) -> None:
    """transformers' Gemma3ForConditionalGeneration runs the same decoder on text (its forward leaves out
    the text model's softcap; SGLang's serves Gemma3ForCausalLM's, as eyas does)."""
    from transformers import Gemma3ForConditionalGeneration

    ids = torch.tensor([[2, 7, 9, 11, 13, 3, 8, 20]])
    wrapper = Gemma3ForConditionalGeneration.from_pretrained(str(zoo["gemma3_multimodal"])).eval()
    loaded = load_text_model(zoo["gemma3_multimodal"], dtype=torch.float32)
    with torch.no_grad():
        theirs = wrapper(input_ids=ids, output_hidden_states=True).hidden_states
        mine = loaded(input_ids=ids, output_hidden_states=True).hidden_states
    for own, other in zip(mine, theirs, strict=True):
        torch.testing.assert_close(own, other)


def test_the_kimi_checkpoint_names_its_heads_under_language_model(zoo: dict[str, Path]) -> None:
    assert stored_head_names(zoo["kimi_k25"]) == {
        "embed": "language_model.model.embed_tokens.weight",
        "norm": "language_model.model.norm.weight",
        "lm_head": "language_model.lm_head.weight",
    }
    assert stored_head_names(zoo["qwen3"])["lm_head"] == "model.embed_tokens.weight"  # tied: the embedding


def test_a_text_tensor_missing_from_a_wrapped_checkpoint_is_an_error_not_a_random_weight(
    zoo: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "gemma3"
    folder.mkdir()
    for file in zoo["gemma3_multimodal"].iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    tensors = load_file(folder / "model.safetensors")
    del tensors["language_model.model.layers.3.mlp.down_proj.weight"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(TargetModelError, match=r"lacks 1 tensors .*language_model\.model\.layers\.3\.mlp"):
        load_text_model(folder, dtype=torch.float32)


@pytest.mark.parametrize("name", sorted(SERVED))
def test_a_planted_target_follows_its_rule_on_every_architecture(tmp_path: Path, name: str) -> None:
    """bench.journey_zoo's targets: the argmax follows each word with the next id (an untied head) or
    repeats it (a tied one) at the sizes SGLang's kernels take, so a draft has something to learn."""
    folder = build(name, tmp_path / name, sizes=SGLANG_SIZES, planted=True)
    ids = torch.randint(4, 46, (2, 24), generator=torch.Generator().manual_seed(2))
    model = reference_model(folder, name)
    probs, _ = own_distribution(model, ids)
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    rule = ids if tied else ids + 1
    assert (probs.argmax(-1) == rule).float().mean().item() > 0.9
