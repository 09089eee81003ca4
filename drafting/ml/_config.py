"""The drafter's config.json: SGLang's `LlamaForCausalLMEagle3` flavour of a flat Llama config."""

from __future__ import annotations

from typing import Any

from drafting.sglang_facts import SGLANG_VERSION_ON_GPU_HOST
from drafting.support_matrix import AUX_CAPTURE_KEY, CaptureKind, TargetSupport, support_for, trained_capture

DRAFTER_ARCHITECTURE = "LlamaForCausalLMEagle3"
NUM_AUX_LAYERS = 3


def text_config(target_config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a target config (multimodal configs nest it under `text_config`)."""
    nested = target_config.get("text_config")
    return dict(nested) if isinstance(nested, dict) else dict(target_config)


def default_aux_layers(num_layers: int) -> list[int]:
    """SGLang's and speculators' default capture points, as HF `output_hidden_states` indices."""
    return [2, num_layers // 2, num_layers - 3]


def check_aux_layers(aux_layers: list[int], num_layers: int) -> list[int]:
    """Refuse capture points SGLang cannot reproduce.

    SGLang captures the *input* of decoder layer i for i in `ids + 1`, so HF index i must name the output of a
    real decoder layer that is not the last one: 1 <= i <= N-1. Three distinct indices, because the drafter's
    fc is 3T wide (a target with fewer than 8 layers makes the default [2, N//2, N-3] collide).
    """
    if len(aux_layers) != NUM_AUX_LAYERS or len(set(aux_layers)) != NUM_AUX_LAYERS:
        raise ValueError(f"aux_layers must be {NUM_AUX_LAYERS} distinct indices, got {aux_layers}")
    bad = [i for i in aux_layers if not 1 <= i <= num_layers - 1]
    if bad:
        raise ValueError(
            f"aux_layers {bad} out of range: HF hidden-state indices 1..{num_layers - 1} "
            f"for a {num_layers}-layer target"
        )
    return sorted(aux_layers)


def _rope_fields(text: dict[str, Any]) -> dict[str, Any]:
    """Rope settings in both spellings: transformers 5 writes `rope_parameters`, older readers want
    `rope_theta`/`rope_scaling`; SGLang prefers `rope_parameters` when present. The drafter runs
    at the target's absolute positions, so these must be the target's."""
    params = text.get("rope_parameters")
    if isinstance(params, dict):
        theta = float(params.get("rope_theta", text.get("rope_theta", 10000.0)))
        parameters = {**params, "rope_theta": theta}
    else:
        theta = float(text.get("rope_theta", 10000.0))
        scaling = dict(text.get("rope_scaling") or {"rope_type": "default"})
        scaling.setdefault("rope_type", scaling.pop("type", "default"))
        parameters = {**scaling, "rope_theta": theta}
    scaling_only = {k: v for k, v in parameters.items() if k != "rope_theta"}
    legacy_scaling = scaling_only if parameters.get("rope_type", "default") != "default" else None
    return {"rope_theta": theta, "rope_scaling": legacy_scaling, "rope_parameters": parameters}


def serving_support(target_config: dict[str, Any], sglang_version: str) -> TargetSupport | None:
    """The support matrix's answer for the target's class in that SGLang release (None: no architectures)."""
    return support_for(target_config, sglang_version)


def serving_ids(target_config: dict[str, Any], aux_layers: list[int], sglang_version: str) -> list[int]:
    """The `eagle_aux_hidden_state_layer_ids` that make the target's SGLang class capture exactly
    `aux_layers` (HF indices): index - 1 for most classes, DeepSeek's own rule for its family.
    ValueError when the class cannot capture them."""
    support = serving_support(target_config, sglang_version)
    if support is None or support.id_rule is None:
        return [i - 1 for i in sorted(aux_layers)]
    try:
        return support.ids_for(aux_layers)
    except ValueError as exc:
        raise ValueError(f"aux_layers {sorted(aux_layers)} for {support.architecture}: {exc}") from None


def serving_capture(
    target_config: dict[str, Any], aux_layers: list[int], sglang_version: str
) -> tuple[CaptureKind, list[int], str]:
    """What extraction must store for the serving class: (capture kind, the ids the draft will carry, a
    line saying what SGLang does with this target). ValueError when the class cannot capture `aux_layers`;
    a class SGLang cannot serve with EAGLE-3 (or whose rule eyas has not read) is said in the line, and the
    residual stream is stored (what the reference engine and a later release may serve)."""
    support = serving_support(target_config, sglang_version)
    ids = serving_ids(target_config, aux_layers, sglang_version)
    if support is None:
        return CaptureKind.RESIDUAL_STREAM, ids, "the target config names no architectures"
    if support.captures is None:
        warning = support.refusal() or support.unknown_rule()
        return CaptureKind.RESIDUAL_STREAM, ids, f"warning: {warning}; storing the residual stream"
    return support.captures, ids, f"{support.describe()} (ids {ids}; {support.origin})"


def drafter_config(
    target_config: dict[str, Any],
    *,
    draft_vocab_size: int,
    aux_layer_ids: list[int],
    aux_capture: CaptureKind = CaptureKind.RESIDUAL_STREAM,
    sglang_version: str = SGLANG_VERSION_ON_GPU_HOST,
) -> dict[str, Any]:
    """config.json for a one-layer EAGLE-3 drafter of this target (hidden size = the target's).

    `aux_layer_ids` are HF hidden-state indices, captured as `aux_capture` says; the config stores the ids
    under which the target's class in `sglang_version` captures those layers (`serving_ids`) under
    `eagle_config.eagle_aux_hidden_state_layer_ids`, and what was trained on under AUX_CAPTURE_KEY.
    """
    text = text_config(target_config)
    num_layers, vocab = int(text["num_hidden_layers"]), int(text["vocab_size"])
    aux = check_aux_layers(list(aux_layer_ids), num_layers)
    ids = serving_ids(target_config, aux, sglang_version)
    if not 0 < draft_vocab_size <= vocab:
        raise ValueError(f"draft_vocab_size {draft_vocab_size} must be in 1..{vocab} (the target vocab)")
    heads = int(text["num_attention_heads"])
    config: dict[str, Any] = {
        "architectures": [DRAFTER_ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": int(text["hidden_size"]),
        "intermediate_size": int(text["intermediate_size"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(text.get("num_key_value_heads") or heads),
        "head_dim": int(text.get("head_dim") or int(text["hidden_size"]) // heads),
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": float(text.get("rms_norm_eps", 1e-6)),
        "vocab_size": vocab,
        "draft_vocab_size": int(draft_vocab_size),
        "max_position_embeddings": int(text.get("max_position_embeddings", 8192)),
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        # transformers 5 writes `dtype`, 4.x `torch_dtype`; SGLang and transformers 5 read `dtype` first.
        "torch_dtype": str(text.get("dtype") or text.get("torch_dtype") or "bfloat16"),
        "dtype": str(text.get("dtype") or text.get("torch_dtype") or "bfloat16"),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
        AUX_CAPTURE_KEY: {
            "layers": aux,
            "captures": CaptureKind(aux_capture).value,
            "target_architecture": (target_config.get("architectures") or [None])[0],
            "sglang_version": sglang_version,
        },
        **_rope_fields(text),
    }
    return config


def aux_layers_of(config: dict[str, Any]) -> list[int]:
    """HF hidden-state indices the drafter was trained on: as eyas recorded them, else read from SGLang's ids
    by the usual convention (id + 1)."""
    layers, _ = trained_capture(config)
    if layers is not None:
        return layers
    return [int(i) + 1 for i in config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]]


def aux_capture_of(config: dict[str, Any]) -> CaptureKind:
    """What the drafter's aux states were: as eyas recorded it, else the residual stream (HF's states)."""
    _, kind = trained_capture(config)
    return kind or CaptureKind.RESIDUAL_STREAM
