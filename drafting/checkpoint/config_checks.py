"""Doctor checks of config.json against SGLang's loader and the target model."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from drafting.checkpoint.layout import aux_layer_ids
from drafting.checkpoint.target import effective_rope
from drafting.checkpoint.target_checks import target_support
from drafting.checkpoint.view import DraftView, is_speculators_config
from drafting.findings import Finding, Severity
from drafting.sglang_facts import DRAFT_ARCHITECTURE, NORM_BEFORE_RESIDUAL, RULES, format_version

FIX_KEYS = "run `eyas fix-keys SRC DST --target TARGET`"
E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 - reads like the report


def check_architecture(view: DraftView) -> Iterator[Finding]:
    archs = view.config.get("architectures")
    if archs == [DRAFT_ARCHITECTURE]:
        return
    if is_speculators_config(view.config):
        why = "speculators' nested format (Eagle3Speculator); SGLang reads sizes from the top level"
    elif archs == ["LlamaForCausalLM"]:
        why = "EAGLE's training config: SGLang would build a full Llama target model, not a draft"
    else:
        why = f"SGLang picks the model class from `architectures`, here {archs!r}"
    yield Finding(E, "ARCHITECTURE", f'architectures must be ["{DRAFT_ARCHITECTURE}"]: {why}', FIX_KEYS)


def check_algorithm(view: DraftView) -> Iterator[Finding]:
    algorithm = view.algorithm.upper()
    if algorithm == "EAGLE3":
        return
    if algorithm in ("EAGLE", "NEXTN"):
        why = (
            f"with {algorithm} the target sends its last hidden state, so fc is skipped, the draft's lm_head "
            "is replaced by the target's and d2t is ignored: no crash, acceptance length about 1.0"
        )
    else:
        why = f"{algorithm} does not run EAGLE-3 drafts"
    yield Finding(E, "ALGORITHM_MISMATCH", why, "launch with --speculative-algorithm EAGLE3")


def check_config_fields(view: DraftView) -> Iterator[Finding]:
    if view.missing_fields:
        yield Finding(
            E,
            "CONFIG_FIELD",
            f"config.json lacks {', '.join(view.missing_fields)}: SGLang cannot build the draft "
            "(and shapes cannot be checked)",
            FIX_KEYS,
        )


def check_draft_vocab(view: DraftView) -> Iterator[Finding]:
    if view.sizes.get("tie_word_embeddings"):
        return
    rows = _lm_head_rows(view)
    hint = f"set draft_vocab_size to {rows} (lm_head rows)" if rows else "set draft_vocab_size"
    if "draft_vocab_size" not in view.config:
        yield Finding(
            E,
            "DRAFT_VOCAB_MISSING",
            "no draft_vocab_size: SGLang reads it as an attribute and startup fails with AttributeError",
            f"{hint} ({FIX_KEYS})",
        )
    elif view.config["draft_vocab_size"] is None:
        yield Finding(
            W,
            "DRAFT_VOCAB_MISSING",
            "draft_vocab_size is null: SGLang builds a full-vocab lm_head and shares the target's",
            hint + " unless the draft really predicts the full vocabulary",
        )


def _lm_head_rows(view: DraftView) -> int | None:
    entry = view.tensors.get("lm_head.weight")
    return entry.shape[0] if entry is not None and entry.shape else None


def check_vocab(view: DraftView) -> Iterator[Finding]:
    target, spec = view.target, view.spec
    if target is None or spec is None or spec.vocab == target.vocab_size:
        return
    yield Finding(
        E,
        "VOCAB_MISMATCH",
        f"vocab_size {spec.vocab} differs from the target's {target.vocab_size}: the draft embeds target "
        "token ids, and d2t maps into the target vocabulary",
        f"set vocab_size to {target.vocab_size} ({FIX_KEYS}); a different tokenizer needs a new draft",
    )


def check_target_hidden(view: DraftView) -> Iterator[Finding]:
    spec = view.spec
    if "target_hidden_size" in view.config and view.config["target_hidden_size"] is None:
        yield Finding(
            E,
            "TARGET_HIDDEN_SIZE",
            "target_hidden_size is null: SGLang tests hasattr() and then builds fc from None (TypeError)",
            "remove the key, or set it to the target's hidden_size",
        )
        return
    if spec is None or view.target is None or spec.target_hidden == view.target.hidden_size:
        return
    yield Finding(
        E,
        "TARGET_HIDDEN_SIZE",
        f"SGLang will size fc for target hidden {spec.target_hidden}, but the target's hidden_size is "
        f"{view.target.hidden_size}",
        f"set target_hidden_size to {view.target.hidden_size} or check that this is the right target",
    )


def check_rope(view: DraftView) -> Iterator[Finding]:
    if view.target is None or view.spec is None:
        return
    draft, target = effective_rope(view.sizes), effective_rope(view.target.rope)
    if draft == target:
        return
    yield Finding(
        W,
        "ROPE_MISMATCH",
        f"rope {draft} differs from the target's {target}: the draft runs at the target's absolute "
        "positions, and trainers use the target's rope",
        f"copy the target's rope settings ({FIX_KEYS}), unless the draft was trained with these",
    )


def check_context(view: DraftView) -> Iterator[Finding]:
    if view.target is None:
        return
    # As SGLang derives both (its get_context_length over each config); the target's reading exists here.
    draft_len = view.reading.context_length
    target_len = view.target_reading.context_length if view.target_reading else view.target.context_length
    if draft_len >= target_len:
        return
    yield Finding(
        W,
        "CONTEXT_SHORTER",
        f"draft context {draft_len} < target context {target_len}: SGLang refuses to start "
        "(ValueError) unless told otherwise",
        f"set max_position_embeddings to {target_len} ({FIX_KEYS}), or launch with "
        f"--context-length {draft_len} or SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
    )


def check_num_layers(view: DraftView) -> Iterator[Finding]:
    spec, limit = view.spec, view.rules.max_layers
    if spec is None or limit is None or spec.num_layers <= limit:
        return
    yield Finding(
        E,
        "NUM_LAYERS",
        f"{spec.num_layers} decoder layers: SGLang {view.version} supports {limit} "
        "(ValueError 'EAGLE3 currently only supports 1 layer')",
        "serve with SGLang 0.5.12 or later",
    )


def check_norm_options(view: DraftView) -> Iterator[Finding]:
    options = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
    for option in options:
        value = view.option(option) or (option == "fc_norm" and view.option("use_aux_norm"))
        if not value or option in view.rules.options:
            continue
        yield Finding(
            E, "NORM_UNSUPPORTED", f"{option}=true: {_norm_effect(option, view.version)}", _norm_fix(option)
        )


def _norm_effect(option: str, version: str) -> str:
    if option == NORM_BEFORE_RESIDUAL:
        return "SGLang's EAGLE-3 layer always keeps the un-normed hidden state as residual"
    return f"SGLang {version} does not implement it; the draft runs without it (and drops its weights)"


def _norm_fix(option: str) -> str:
    if option == NORM_BEFORE_RESIDUAL:
        return "retrain with norm_before_residual=false (speculators: --no-norm-before-residual)"
    first = next(rules.first for rules in RULES if option in rules.options)
    return f"serve with SGLang {format_version(first)} or later, or retrain with {option}=false"


def check_sliding_window(view: DraftView) -> Iterator[Finding]:
    sizes = view.sizes
    windowed = "sliding_attention" in (sizes.get("layer_types") or []) or bool(
        sizes.get("use_sliding_window")
    )
    window = sizes.get("sliding_window")
    if not windowed or not window:
        return
    if view.rules.draft_window_flag:
        yield Finding(
            W,
            "SLIDING_WINDOW",
            f"trained with a {window}-token sliding window; SGLang ignores it in config.json",
            f"launch with --speculative-draft-window-size {window}",
        )
    else:
        yield Finding(
            E,
            "SLIDING_WINDOW",
            f"trained with a {window}-token sliding window; SGLang {view.version} has full attention only",
            "serve with SGLang 0.5.12 or later (--speculative-draft-window-size), or retrain",
        )


def check_tied_embeddings(view: DraftView) -> Iterator[Finding]:
    spec = view.spec
    if spec is None or not spec.tie_embeddings:
        return
    if spec.draft_vocab != spec.vocab or "lm_head.weight" in view.tensors:
        yield Finding(
            E,
            "TIED_EMBEDDINGS",
            "tie_word_embeddings=true: SGLang uses the (target's) embedding as lm_head and drops the "
            "draft's own lm_head",
            "set tie_word_embeddings to false",
        )
    else:
        yield Finding(I, "TIED_EMBEDDINGS", "lm_head is tied to the embedding (the target's, at runtime)")


def check_aux_layer_ids(view: DraftView) -> Iterator[Finding]:
    ids, top_level = aux_layer_ids(view.config), view.config.get("eagle_aux_hidden_state_layer_ids")
    if ids is None and isinstance(top_level, list):
        yield from _top_level_ids(view, top_level)
    if ids is None:
        return
    if not view.rules.num_aux_configurable and len(ids) != 3:
        yield Finding(
            E,
            "AUX_LAYER_IDS",
            f"{len(ids)} aux layers: SGLang {view.version} always feeds 3",
            "serve with 0.5.12+",
        )
    target, support = view.target, target_support(view)
    if target is None or (support is not None and support.id_rule is not None):
        return  # the serving class's own rule is checked by target_checks.check_aux_capture
    bad = [i for i in ids if not -1 <= i <= target.num_layers - 2]
    if bad:
        yield Finding(
            E,
            "AUX_LAYER_IDS",
            f"aux layer ids {bad} out of range: SGLang captures the input of layer id + 1, "
            f"which must lie in 0..{target.num_layers - 1}",
            "use SGLang's convention: the output of decoder layer id (speculators' ids minus one)",
        )


def _top_level_ids(view: DraftView, ids: list[int]) -> Iterator[Finding]:
    """speculators writes HF hidden_states indices at the top level; SGLang's target never reads them."""
    target = view.target
    n = target.num_layers if target else None
    default = [2, n // 2, n - 3] if n else None
    if default is not None and ids == default:
        return
    support = target_support(view)
    sglang_ids = [i - 1 for i in ids]
    if support is not None and support.id_rule is not None:
        # on ValueError the shifted ids stay the suggestion: the class cannot capture these layers anyway
        with contextlib.suppress(ValueError):
            sglang_ids = support.ids_for(ids)
    yield Finding(
        E if target else W,
        "AUX_LAYER_IDS",
        f"aux layer ids {ids} are at the top level (speculators' convention, HF hidden_states indices): "
        "SGLang's target reads only eagle_config.eagle_aux_hidden_state_layer_ids and would capture "
        f"its default layers{f' {default}' if default else ''} instead",
        f"write eagle_config.eagle_aux_hidden_state_layer_ids = {sglang_ids} ({FIX_KEYS})",
    )


CONFIG_CHECKS = (
    check_architecture,
    check_algorithm,
    check_config_fields,
    check_draft_vocab,
    check_vocab,
    check_target_hidden,
    check_rope,
    check_context,
    check_num_layers,
    check_norm_options,
    check_sliding_window,
    check_tied_embeddings,
    check_aux_layer_ids,
)
