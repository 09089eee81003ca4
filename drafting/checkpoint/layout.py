"""SGLang's `LlamaForCausalLMEagle3` as data: the parameters it builds and how it names checkpoint keys.

`expected_parameters` mirrors the module tree SGLang builds from a draft config (sglang
models/llama_eagle3.py), `resolve_name` mirrors its `load_weights` key handling, including the silent
drop of every name it cannot place. The doctor checks a checkpoint by running its names through both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drafting.sglang_facts import DEFAULT_NUM_AUX, FC_NORM, NORM_BEFORE_FC, SGLangRules

# load_weights fuses these into one parameter: (fused name, checkpoint part, shard id).
STACKED_PARTS = (
    (".qkv_proj", ".q_proj", "q"),
    (".qkv_proj", ".k_proj", "k"),
    (".qkv_proj", ".v_proj", "v"),
    (".gate_up_proj", ".gate_proj", "0"),
    (".gate_up_proj", ".up_proj", "1"),
)
WHOLE = ""  # shard id of a parameter loaded in one piece


class ConfigFieldMissing(Exception):
    """The draft config lacks fields SGLang needs to build the model."""

    def __init__(self, fields: list[str]) -> None:
        super().__init__(", ".join(fields))
        self.fields = fields


@dataclass(frozen=True)
class DraftSpec:
    """The draft's sizes as SGLang derives them from config.json (under one rules row)."""

    hidden: int
    target_hidden: int  # fc input width per aux state: `target_hidden_size` if present, else hidden
    num_aux: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    num_layers: int
    vocab: int
    draft_vocab: int
    tie_embeddings: bool
    fc_bias: bool
    attention_bias: bool
    norm_before_fc: bool
    fc_norm: bool

    @property
    def embed_shared_with_target(self) -> bool:
        """SGLang's set_embed swaps in the target's embedding unless the hidden sizes differ."""
        return self.target_hidden == self.hidden


@dataclass(frozen=True)
class ExpectedParam:
    name: str
    shards: dict[str, tuple[int, ...]]
    required: bool


@dataclass(frozen=True)
class Placement:
    """Where SGLang puts one checkpoint tensor: a parameter shard, the d2t map, t2d, or nowhere."""

    kind: str  # "param" | "d2t" | "t2d" | "ignored"
    param: str | None = None
    shard: str = WHOLE


def aux_layer_ids(config: Mapping[str, Any]) -> list[int] | None:
    eagle = config.get("eagle_config")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    return list(ids) if isinstance(ids, list) else None


def draft_spec(config: Mapping[str, Any], rules: SGLangRules) -> DraftSpec:
    """Sizes of the draft SGLang would build; ConfigFieldMissing when the config cannot say."""
    missing = [key for key in ("hidden_size", "num_attention_heads", "vocab_size") if key not in config]
    inter_key = "intermediate_size_mlp" if config.get("model_type") == "llama4_text" else "intermediate_size"
    if inter_key not in config:
        missing.append(inter_key)
    if missing:
        raise ConfigFieldMissing(missing)
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    vocab = int(config["vocab_size"])
    target_hidden = config.get("target_hidden_size", hidden) if "target_hidden_size" in config else hidden
    eagle_config = config.get("eagle_config")
    eagle: Mapping[str, Any] = eagle_config if isinstance(eagle_config, dict) else {}
    draft_vocab = config.get("draft_vocab_size")
    return DraftSpec(
        hidden=hidden,
        target_hidden=int(target_hidden) if target_hidden is not None else hidden,
        num_aux=_num_aux(config, rules),
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate=int(config[inter_key]),
        num_layers=int(config.get("num_hidden_layers") or 1),
        vocab=vocab,
        draft_vocab=int(draft_vocab) if draft_vocab is not None else vocab,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        fc_bias=bool(config.get("bias", False)),
        attention_bias=bool(config.get("attention_bias", False) or config.get("bias", False)),
        norm_before_fc=NORM_BEFORE_FC in rules.options
        and bool(eagle.get("norm_before_fc", config.get("norm_before_fc", False))),
        fc_norm=FC_NORM in rules.options and bool(config.get("fc_norm") or config.get("use_aux_norm")),
    )


def _num_aux(config: Mapping[str, Any], rules: SGLangRules) -> int:
    if not rules.num_aux_configurable:
        return DEFAULT_NUM_AUX
    explicit = config.get("num_aux_hidden_states")
    if explicit is not None:
        return int(explicit)
    ids = aux_layer_ids(config)
    return len(ids) if ids else DEFAULT_NUM_AUX


def expected_parameters(spec: DraftSpec, rules: SGLangRules) -> dict[str, ExpectedParam]:
    """Every parameter SGLang builds for this draft, with the shape each checkpoint piece must have."""
    h, t, k = spec.hidden, spec.target_hidden, spec.num_aux
    params = [
        ExpectedParam(
            "model.embed_tokens.weight", {WHOLE: (spec.vocab, h)}, not spec.embed_shared_with_target
        ),
        ExpectedParam("model.fc.weight", {WHOLE: (h, k * t)}, True),
        ExpectedParam("model.norm.weight", {WHOLE: (h,)}, True),
    ]
    if spec.fc_bias:
        params.append(ExpectedParam("model.fc.bias", {WHOLE: (h,)}, True))
    if spec.norm_before_fc:
        params.append(ExpectedParam("model.input_norm.weight", {WHOLE: (k * t,)}, True))
    if spec.fc_norm:
        params += [ExpectedParam(f"model.fc_norm.{i}.weight", {WHOLE: (t,)}, True) for i in range(k)]
    layer_count = 1 if rules.max_layers == 1 else spec.num_layers
    for index in range(layer_count):
        params += _layer_parameters(spec, "model." + rules.layer_prefix(index), index)
    if not spec.tie_embeddings:
        params.append(ExpectedParam("lm_head.weight", {WHOLE: (spec.draft_vocab, h)}, True))
    return {param.name: param for param in params}


def _layer_parameters(spec: DraftSpec, prefix: str, index: int) -> list[ExpectedParam]:
    h, inner, kv = spec.hidden, spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    width_in = 2 * h if index == 0 else h  # layer 0 reads cat(embeds, hidden)
    inter = spec.intermediate
    params = [
        ExpectedParam(prefix + "self_attn.qkv_proj.weight", _qkv_shards(inner, kv, width_in), True),
        ExpectedParam(prefix + "self_attn.o_proj.weight", {WHOLE: (h, inner)}, True),
        ExpectedParam(prefix + "mlp.gate_up_proj.weight", {"0": (inter, h), "1": (inter, h)}, True),
        ExpectedParam(prefix + "mlp.down_proj.weight", {WHOLE: (h, spec.intermediate)}, True),
        ExpectedParam(prefix + "hidden_norm.weight", {WHOLE: (h,)}, True),
        ExpectedParam(prefix + "post_attention_layernorm.weight", {WHOLE: (h,)}, True),
        # Layers after the first never call input_layernorm, but the module has it.
        ExpectedParam(prefix + "input_layernorm.weight", {WHOLE: (h,)}, index == 0),
    ]  # fmt: skip
    if spec.attention_bias:
        params.append(ExpectedParam(prefix + "self_attn.o_proj.bias", {WHOLE: (h,)}, True))
    return params


def _qkv_shards(inner: int, kv: int, width_in: int) -> dict[str, tuple[int, ...]]:
    return {"q": (inner, width_in), "k": (kv, width_in), "v": (kv, width_in)}


def resolve_name(name: str, rules: SGLangRules, params: Mapping[str, ExpectedParam]) -> Placement:
    """What SGLang's load_weights does with one checkpoint key (mirrors it step by step)."""
    for legacy, new in rules.legacy_renames:
        if legacy in name:
            name = name.replace(legacy, new)
    if "d2t" in name:
        return Placement("d2t")
    if "t2d" in name:
        return Placement("t2d")
    for fused, part, shard in STACKED_PARTS:
        if part in name:
            candidate = name.replace(part, fused)
            param = candidate if candidate in params else f"model.{candidate}"
            return Placement("param", param, shard) if param in params else Placement("ignored")
    param = name if name in params else f"model.{name}"
    return Placement("param", param) if param in params else Placement("ignored")
