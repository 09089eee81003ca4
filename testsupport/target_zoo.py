"""Tiny random targets of the architectures users serve, one function per architecture.

Each builds its model with transformers from a config (random weights, seeded), saves it with
`save_pretrained` as transformers 5 writes it, adds the tests' word-level tokenizer with a chat template
(cli/demo/constructed.py), and returns the folder. Sizes stay tiny for the CPU (hidden 32, vocab 64) but
every target has 8 decoder layers, so the default aux layers [2, N//2, N-3] = [2, 4, 5] are distinct.

Two entries are wrappers whose text model sits inside another model:
- `gemma3_multimodal`: Gemma3ForConditionalGeneration (a SigLIP tower, the text model as `language_model`);
- `kimi_k25`: shaped as moonshotai/Kimi-K2.5 keeps its checkpoint: architecture
  `KimiK25ForConditionalGeneration`, model_type `kimi_k25`, a DeepSeek-V3 text model (MLA, MoE, yarn rope,
  context 262,144) under `text_config` with the model_type `kimi_k2` its hub config names, weights under
  `language_model.model.*` / `language_model.lm_head.*` beside `vision_tower.*` and `mm_projector.*`
  (SGLang's kimi_k25.py strips `language_model.`; transformers' conversion_mapping.py maps the same names),
  sharded with an index, and an `auto_map` naming code files the folder does not hold.

`REFUSED` names the targets SGLang cannot serve with EAGLE-3 (their classes lack
`set_eagle3_layers_to_capture`): Mixtral and a Llava-style model, for the refusal paths. `remote_code`
(not in ZOO) builds a target only its own code can load.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (
    CLIPVisionConfig,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Gemma3Config,
    Gemma3ForCausalLM,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    GptOssConfig,
    GptOssForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    SiglipVisionConfig,
)

from cli.demo.constructed import build_tokenizer

NUM_LAYERS = 8
VOCAB = 64  # the tokenizer's 47 tokens, with room for multimodal placeholders above them
BOS, EOS, PAD = 2, 3, 0  # the tokenizer's <s>, <|end|>, [PAD]
IMAGE_TOKEN, BOI_TOKEN, EOI_TOKEN = 63, 61, 62

# Common to every text model: 4 query heads of 8, 2 KV heads, SwiGLU 64 wide.
TINY: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": NUM_LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
}


def _save(folder: Path, model: PreTrainedModel) -> Path:
    model.eval().save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


def _built(model_class: type[PreTrainedModel], config: Any, seed: int) -> PreTrainedModel:
    torch.manual_seed(seed)
    model = model_class(config)
    if _PLANTING["on"]:
        _plant_rule(model)
    return model


_PLANTING = {"on": False}  # set while `build(..., planted=True)` runs


def _plant_rule(model: PreTrainedModel) -> None:
    """A next token a draft can learn, on any architecture: the embedding scaled up so that each position's
    residual stream is mostly its own token (pre-norm layers add outputs of a fixed size), and an untied head
    whose row k is token k-1's embedding, so the argmax follows each token with the next id; a tied head
    repeats the current token. Random weights otherwise answer near-uniformly, which no draft can learn."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    head_weight = head.weight if head is not None else None
    if not isinstance(embedding, torch.Tensor):
        raise TypeError(f"{type(model).__name__}: its input embedding has no weight tensor")
    with torch.no_grad():
        embedding.mul_(10)
        if isinstance(head_weight, torch.Tensor) and head_weight.data_ptr() != embedding.data_ptr():
            head_weight.copy_(torch.roll(embedding, shifts=1, dims=0))


def llama(folder: Path, seed: int = 0) -> Path:
    return _save(folder, _built(LlamaForCausalLM, LlamaConfig(**TINY), seed))


def qwen2(folder: Path, seed: int = 0) -> Path:
    config = Qwen2Config(**TINY, tie_word_embeddings=False)  # q/k/v biases, the Qwen2 way
    return _save(folder, _built(Qwen2ForCausalLM, config, seed))


def qwen3(folder: Path, seed: int = 0) -> Path:
    config = Qwen3Config(**TINY, tie_word_embeddings=True)  # q/k norms; the small Qwen3s tie their head
    return _save(folder, _built(Qwen3ForCausalLM, config, seed))


def qwen3_moe(folder: Path, seed: int = 0) -> Path:
    config = Qwen3MoeConfig(
        **TINY, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1
    )
    return _save(folder, _built(Qwen3MoeForCausalLM, config, seed))


def mistral(folder: Path, seed: int = 0) -> Path:
    return _save(folder, _built(MistralForCausalLM, MistralConfig(**TINY, sliding_window=None), seed))


def phi3(folder: Path, seed: int = 0) -> Path:
    config = Phi3Config(**{k: v for k, v in TINY.items() if k != "head_dim"})  # fused qkv and gate_up
    return _save(folder, _built(Phi3ForCausalLM, config, seed))


def _gemma3_text() -> Gemma3TextConfig:
    """Gemma's own norm ((1 + w) scaling), a scaled embedding, sliding layers, a tied head, and a final
    logit softcap: released Gemma3 configs leave `final_logit_softcapping` null (Gemma2's is 30.0), and
    Gemma3's forward and SGLang's LogitsProcessor both apply it when set; a small cap here bites random
    logits, so a head that skips it is seen."""
    return Gemma3TextConfig(
        **TINY,
        query_pre_attn_scalar=8,
        sliding_window=16,
        layer_types=["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 2,
        final_logit_softcapping=2.0,
        tie_word_embeddings=True,
    )


def gemma3_text(folder: Path, seed: int = 0) -> Path:
    return _save(folder, _built(Gemma3ForCausalLM, _gemma3_text(), seed))


def gemma3_multimodal(folder: Path, seed: int = 0) -> Path:
    config = Gemma3Config(
        text_config=_gemma3_text().to_dict(),
        vision_config=SiglipVisionConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            image_size=28, patch_size=14,
        ).to_dict(),
        mm_tokens_per_image=4,
        image_token_index=IMAGE_TOKEN,
        boi_token_index=BOI_TOKEN,
        eoi_token_index=EOI_TOKEN,
    )  # fmt: skip
    return _save(folder, _built(Gemma3ForConditionalGeneration, config, seed))


def _deepseek_v3(**overrides: Any) -> DeepseekV3Config:
    """MLA (low-rank q and kv, a separate rope head), MoE with a shared expert after one dense layer,
    sigmoid routing with a correction bias, yarn rope."""
    fields: dict[str, Any] = {
        **{k: v for k, v in TINY.items() if k != "head_dim"},
        "num_key_value_heads": 4,
        "q_lora_rank": 16,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8,
        "v_head_dim": 8,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "moe_intermediate_size": 16,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "max_position_embeddings": 2048,
        "rope_parameters": {
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 512,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        },
        "tie_word_embeddings": False,
    }  # fmt: skip
    return DeepseekV3Config(**{**fields, **overrides})


def deepseek_v3(folder: Path, seed: int = 0) -> Path:
    return _save(folder, _built(DeepseekV3ForCausalLM, _deepseek_v3(), seed))


def gpt_oss(folder: Path, seed: int = 0) -> Path:
    config = GptOssConfig(
        **{**TINY, "max_position_embeddings": 131_072},  # its yarn rope: 32 x 4096 positions
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"] * (NUM_LAYERS // 2),
    )
    return _save(folder, _built(GptOssForCausalLM, config, seed))


def mixtral(folder: Path, seed: int = 0) -> Path:
    config = MixtralConfig(**TINY, num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
    return _save(folder, _built(MixtralForCausalLM, config, seed))


def llava(folder: Path, seed: int = 0) -> Path:
    config = LlavaConfig(
        text_config=LlamaConfig(**TINY).to_dict(),
        vision_config=CLIPVisionConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            image_size=28, patch_size=14, projection_dim=16,
        ).to_dict(),
        image_token_index=IMAGE_TOKEN,
    )  # fmt: skip
    return _save(folder, _built(LlavaForConditionalGeneration, config, seed))


KIMI_MAX_POSITIONS = 262_144
KIMI_AUTO_MAP = {
    "AutoConfig": "configuration_kimi_k25.KimiK25Config",
    "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
    "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
}


def kimi_k25(folder: Path, seed: int = 0) -> Path:
    """The reference deployment's target, shrunk: see the module docstring for what it keeps. 8 attention
    heads (the real one has 64), so tensor parallel 8 splits them as it does the real one's."""
    text = _deepseek_v3(
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=KIMI_MAX_POSITIONS,
        rope_parameters={
            "rope_type": "yarn", "rope_theta": 50000.0, "factor": 64.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        },
    )  # fmt: skip
    staging = folder.parent / f".{folder.name}.text-model"
    _built(DeepseekV3ForCausalLM, text, seed).eval().save_pretrained(staging)
    text_fields = json.loads((staging / "config.json").read_text())
    with safe_open(str(staging / "model.safetensors"), framework="pt") as handle:
        tensors = {f"language_model.{name}": handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 - safe_open has no __iter__
    torch.manual_seed(seed + 1)
    tensors.update(
        {
            "vision_tower.patch_embed.proj.weight": torch.randn(16, 3, 14, 14),
            "vision_tower.encoder.final_layernorm.weight": torch.ones(16),
            "mm_projector.proj.0.weight": torch.randn(32, 64),
            "mm_projector.proj.2.weight": torch.randn(32, 32),
        }
    )
    _write_sharded(folder, tensors, shards=2)
    for leftover in staging.iterdir():
        leftover.unlink()
    staging.rmdir()
    text_fields.update(model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"])
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "auto_map": KIMI_AUTO_MAP,
        "text_config": text_fields,
        "vision_config": {
            "patch_size": 14, "init_pos_emb_height": 4, "init_pos_emb_width": 4, "init_pos_emb_time": 4,
            "pos_emb_type": "divided_fixed", "vt_num_attention_heads": 2, "vt_num_hidden_layers": 1,
            "vt_hidden_size": 16, "vt_intermediate_size": 32, "merge_kernel_size": [2, 2],
            "mm_projector_type": "patchmerger", "mm_hidden_size": 16, "text_hidden_size": 32,
        },
        "media_placeholder_token_id": IMAGE_TOKEN,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "tie_word_embeddings": False,
        "dtype": text_fields.get("dtype", "float32"),
        "transformers_version": text_fields.get("transformers_version"),
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    build_tokenizer().save_pretrained(folder)
    return folder


def _write_sharded(folder: Path, tensors: dict[str, torch.Tensor], *, shards: int) -> None:
    """model-0000i-of-0000n.safetensors files and model.safetensors.index.json, as hub checkpoints ship."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    weight_map: dict[str, str] = {}
    for shard in range(shards):
        file = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: tensors[name].contiguous() for name in names[shard::shards]}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


REMOTE_CONFIG = """from transformers import LlamaConfig


class EyasTinyConfig(LlamaConfig):
    model_type = "eyas_tiny_remote"
"""
REMOTE_MODELING = """from transformers import LlamaForCausalLM

from .configuration_eyas_tiny import EyasTinyConfig


class EyasTinyForCausalLM(LlamaForCausalLM):
    config_class = EyasTinyConfig
"""


def remote_code(folder: Path, seed: int = 0, *, with_code: bool = True) -> Path:
    """A Llama whose config names a model type transformers does not ship (`eyas_tiny_remote`): only the
    folder's own code (`auto_map`) builds it. `with_code=False` leaves the code files out, as a checkpoint
    copied without them."""
    _save(folder, _built(LlamaForCausalLM, LlamaConfig(**TINY), seed))
    config = json.loads((folder / "config.json").read_text())
    config.update(
        model_type="eyas_tiny_remote",
        architectures=["EyasTinyForCausalLM"],
        auto_map={
            "AutoConfig": "configuration_eyas_tiny.EyasTinyConfig",
            "AutoModelForCausalLM": "modeling_eyas_tiny.EyasTinyForCausalLM",
        },
    )
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if with_code:
        (folder / "configuration_eyas_tiny.py").write_text(REMOTE_CONFIG)
        (folder / "modeling_eyas_tiny.py").write_text(REMOTE_MODELING)
    return folder


ZOO: dict[str, Callable[..., Path]] = {
    "llama": llama,
    "qwen2": qwen2,
    "qwen3": qwen3,
    "qwen3_moe": qwen3_moe,
    "mistral": mistral,
    "phi3": phi3,
    "gemma3_text": gemma3_text,
    "gemma3_multimodal": gemma3_multimodal,
    "deepseek_v3": deepseek_v3,
    "gpt_oss": gpt_oss,
    "kimi_k25": kimi_k25,
    "mixtral": mixtral,
    "llava": llava,
}
REFUSED = frozenset({"mixtral", "llava"})
SERVED = tuple(name for name in ZOO if name not in REFUSED)


# The zoo at sizes SGLang's GPU kernels take (its triton attention has no 8-wide heads), for benchmarks
# that run a zoo target in SGLang on a GPU host.
SGLANG_SIZES: dict[str, Any] = {"hidden_size": 256, "intermediate_size": 512, "head_dim": 64}


def build(
    name: str, folder: Path, seed: int = 0, sizes: dict[str, Any] | None = None, *, planted: bool = False
) -> Path:
    """The zoo's `name` target, saved in `folder`; `sizes` replace TINY's for this build; `planted` gives it
    a next-token rule a draft can learn (`_plant_rule`)."""
    with _building(sizes or {}, planted):
        return ZOO[name](folder, seed)


@contextmanager
def _building(sizes: dict[str, Any], planted: bool) -> Iterator[None]:
    """The builders read TINY and _PLANTING as they run: set for one build, restored after it."""
    unknown = sorted(set(sizes) - set(TINY))
    if unknown:
        raise KeyError(f"no zoo size {unknown[0]!r}; known: {', '.join(TINY)}")
    kept = dict(TINY)
    TINY.update(sizes)
    _PLANTING["on"] = planted
    try:
        yield
    finally:
        TINY.clear()
        TINY.update(kept)
        _PLANTING["on"] = False
