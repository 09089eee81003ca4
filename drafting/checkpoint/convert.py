"""The conversion plan: an SGLang config.json and the fate of every tensor (no bytes touched here)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from drafting.checkpoint.dtypes import DTYPE_KEYS, dtype_for_config
from drafting.checkpoint.errors import CheckpointError
from drafting.checkpoint.layout import aux_layer_ids
from drafting.checkpoint.report import TensorMove
from drafting.checkpoint.safetensors_io import TensorEntry
from drafting.checkpoint.target import ROPE_KEYS, TargetModel
from drafting.checkpoint.tensor_checks import strip_trainer_prefixes
from drafting.checkpoint.view import SPECULATORS_LAYER_CONFIG, is_speculators_config
from drafting.sglang_facts import DRAFT_ARCHITECTURE, UNUSED_BY_SGLANG, context_length
from drafting.support_matrix import AUX_CAPTURE_KEY, support_for_architecture

# speculators-only keys with no meaning to SGLang.
_SPECULATORS_ONLY = (
    "speculators_model_type",
    "speculators_config",
    "speculators_version",
    SPECULATORS_LAYER_CONFIG,
    "embed_requires_grad",
)
_CARRIED_OPTIONS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
# speculators states the draft's dtype at the top level (save_pretrained writes the model's dtype there),
# never inside transformer_layer_config; SGLang reads only the flat config, so it must move down with the
# sizes, or SGLang builds the draft in float16 (docs/checkpoint.md, "Fields SGLang reads").
_SPECULATORS_DTYPE_KEYS = ("dtype", "torch_dtype")
# Names as every SGLang 0.5.x loads them: the first decoder layer is `midlayer` (0.5.12+ maps it).
_RENAMES = (
    (re.compile(r"^layers\.0\."), "midlayer."),
    (re.compile(r"^aux_norm_low\."), "fc_norm.0."),
    (re.compile(r"^aux_norm_mid\."), "fc_norm.1."),
    (re.compile(r"^aux_norm_high\."), "fc_norm.2."),
)


class _Changes(list[str]):
    def set(self, config: dict[str, Any], key: str, value: Any, why: str = "") -> None:
        old = config.get(key, "<absent>")
        if old != value:
            config[key] = value
            self.append(f"{key}: {old!r} -> {value!r}" + (f" ({why})" if why else ""))

    def drop(self, config: dict[str, Any], key: str, why: str) -> None:
        if key in config:
            self.append(f"{key}: removed ({why})")
            del config[key]


def build_sglang_config(
    source: Mapping[str, Any],
    target: TargetModel | None,
    tensors: Mapping[str, TensorEntry],
    sglang_version: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The config SGLang's LlamaForCausalLMEagle3 reads, and a line per change made."""
    changes = _Changes()
    config = _flatten_speculators(source, changes) if is_speculators_config(source) else dict(source)
    changes.set(config, "architectures", [DRAFT_ARCHITECTURE])
    config.setdefault("model_type", "llama")
    config.setdefault("num_hidden_layers", 1)
    if "draft_vocab_size" not in config:
        rows = _draft_vocab_from_tensors(tensors)
        if rows is not None:
            changes.set(config, "draft_vocab_size", rows, "rows of lm_head / length of d2t")
    if "tie_word_embeddings" not in config:
        changes.set(config, "tie_word_embeddings", False, "EAGLE-3 drafts own their lm_head")
    if isinstance(config.get("eagle_aux_hidden_state_layer_ids"), list):
        ids = config.pop("eagle_aux_hidden_state_layer_ids")
        _move_aux_ids(config, ids, _serving_ids(ids, target, sglang_version), changes)
    if target is not None:
        _adopt_target(config, target, changes)
    _state_dtype(config, target, tensors, changes)
    if "target_hidden_size" in config and config["target_hidden_size"] in (None, config.get("hidden_size")):
        changes.drop(
            config, "target_hidden_size", "null or equal to hidden_size; SGLang treats null as a size"
        )
    return config, list(changes)


def _flatten_speculators(source: Mapping[str, Any], changes: _Changes) -> dict[str, Any]:
    """speculators nests the layer config; SGLang wants one flat LlamaConfig plus draft fields."""
    config = dict(source.get(SPECULATORS_LAYER_CONFIG) or {})
    config["architectures"] = source.get("architectures")
    changes.append(f"flattened {SPECULATORS_LAYER_CONFIG} to the top level")
    for key in _SPECULATORS_DTYPE_KEYS:
        if source.get(key):
            config[key] = source[key]
    config["draft_vocab_size"] = source.get("draft_vocab_size")
    config["tie_word_embeddings"] = bool(source.get("tie_word_embeddings", False))
    if source.get("target_hidden_size") is not None:
        config["target_hidden_size"] = source["target_hidden_size"]
    for option in _CARRIED_OPTIONS:
        if source.get(option):
            config[option] = True
    if isinstance(source.get("eagle_aux_hidden_state_layer_ids"), list):
        config["eagle_aux_hidden_state_layer_ids"] = source["eagle_aux_hidden_state_layer_ids"]
    elif aux_layer_ids(source) is None:
        changes.append("aux layers: none given, SGLang's default [2, n//2, n-3] equals speculators' default")
    for key in _SPECULATORS_ONLY:
        if key in source:
            changes.append(f"{key}: not carried (speculators only)")
    return config


def _state_dtype(
    config: dict[str, Any], target: TargetModel | None, tensors: Mapping[str, TensorEntry], changes: _Changes
) -> None:
    """State the dtype SGLang must build the draft in, under both keys readers use (see dtype_for_config)."""
    dtype, why = dtype_for_config(config, tensors, target)
    if dtype is None:
        return
    for key in DTYPE_KEYS:
        changes.set(config, key, dtype, why)


def _serving_ids(
    layers: list[int], target: TargetModel | None, sglang_version: str | None
) -> tuple[list[int], str]:
    """The ids under which the target's SGLang class captures `layers` (speculators' HF indices), and why:
    one less for most classes; the class's own rule where the support matrix knows it (DeepSeek's)."""
    shifted = [int(i) - 1 for i in layers]
    if target is None or not target.architectures or sglang_version is None:
        return shifted, "shifted by one to SGLang's convention"
    support = support_for_architecture(target.architectures[0], sglang_version)
    try:
        ids = support.ids_for([int(i) for i in layers]) if support.id_rule else shifted
    except ValueError:
        return shifted, "shifted by one (the target's class cannot capture these layers: see the doctor)"
    if ids == shifted:
        return ids, "shifted by one to SGLang's convention"
    return ids, f"the ids under which SGLang {support.release}'s {support.architecture} captures them"


def _move_aux_ids(
    config: dict[str, Any], layers: list[int], serving: tuple[list[int], str], changes: _Changes
) -> None:
    """speculators' ids are HF hidden_states indices; SGLang's are what `_serving_ids` gives."""
    ids, why = serving
    eagle = dict(config.get("eagle_config") or {})
    eagle["eagle_aux_hidden_state_layer_ids"] = ids
    eagle.setdefault("use_aux_hidden_state", True)
    changes.set(config, "eagle_config", eagle, f"speculators' ids {layers}: {why}")
    if AUX_CAPTURE_KEY not in config:  # the layers it trained on, which a class's own id rule hides
        trained = {"layers": sorted(int(i) for i in layers)}
        changes.set(config, AUX_CAPTURE_KEY, trained, "the layers speculators' ids name")


def _adopt_target(config: dict[str, Any], target: TargetModel, changes: _Changes) -> None:
    changes.set(config, "vocab_size", target.vocab_size, "the target's")
    hidden = config.get("hidden_size")
    if hidden is not None and hidden != target.hidden_size:
        changes.set(
            config, "target_hidden_size", target.hidden_size, "target hidden differs from the draft's"
        )
    for key in ROPE_KEYS:
        if key in target.rope:
            changes.set(config, key, target.rope[key], "the target's rope")
        elif key in config:
            changes.drop(config, key, "the target has none")
    if target.max_position_embeddings and context_length(config) < target.context_length:
        changes.set(config, "max_position_embeddings", target.max_position_embeddings, "the target's context")


def _draft_vocab_from_tensors(tensors: Mapping[str, TensorEntry]) -> int | None:
    for name, entry in tensors.items():
        bare = strip_trainer_prefixes(name)
        if bare == "lm_head.weight" and entry.shape:
            return entry.shape[0]
    for name, entry in tensors.items():
        if strip_trainer_prefixes(name) == "d2t" and len(entry.shape) == 1:
            return entry.shape[0]
    return None


def plan_tensors(tensors: Mapping[str, TensorEntry], config: Mapping[str, Any]) -> list[TensorMove]:
    """Kept, renamed or dropped, for every source tensor; CheckpointError when two land on one name."""
    embed_shared = config.get("target_hidden_size", config.get("hidden_size")) == config.get("hidden_size")
    moves = [_plan_one(name, embed_shared) for name in sorted(tensors)]
    seen: dict[str, str] = {}
    for move in moves:
        if move.dest is None:
            continue
        if move.dest in seen:
            raise CheckpointError(
                f"tensors {seen[move.dest]!r} and {move.source!r} both become {move.dest!r}"
            )
        seen[move.dest] = move.source
    return moves


def _plan_one(name: str, embed_shared: bool) -> TensorMove:
    bare = strip_trainer_prefixes(name)
    if bare in UNUSED_BY_SGLANG:
        return TensorMove(name, "dropped", reason="SGLang never reads it")
    if bare == "embed_tokens.weight" and embed_shared:
        return TensorMove(name, "dropped", reason="SGLang replaces it with the target's embedding")
    renamed = bare
    for pattern, replacement in _RENAMES:
        renamed = pattern.sub(replacement, renamed)
    if renamed == name:
        return TensorMove(name, "kept", dest=name)
    return TensorMove(name, "renamed", dest=renamed)
