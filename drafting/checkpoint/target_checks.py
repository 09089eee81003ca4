"""Doctor checks of the draft against the target's SGLang class, by the support matrix.

Whether the release serves EAGLE-3 for the target's class at all (`set_eagle3_layers_to_capture`), and
whether the states that class hands the draft for the saved ids are the ones the draft was trained on: the
same layers under the class's id rule, the same tensor at each (the residual stream, or Gemma3's block
branch in 0.5.23).
"""

from __future__ import annotations

from collections.abc import Iterator

from drafting.checkpoint.layout import aux_layer_ids
from drafting.checkpoint.view import DraftView
from drafting.findings import Finding, Severity
from drafting.support_matrix import (
    CAPTURE_METHOD,
    CaptureKind,
    TargetSupport,
    support_for_architecture,
    trained_capture,
)
from drafting.support_matrix.rules import CAPTURE_TEXT, ID_RULE_TEXT

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 - reads like the report
RETRAIN = "extract again with sglang_version set to the serving release, then train"


def target_support(view: DraftView) -> TargetSupport | None:
    target = view.target
    if target is None or not target.architectures:
        return None
    return support_for_architecture(target.architectures[0], view.version)


def check_target_class(view: DraftView) -> Iterator[Finding]:
    """An EAGLE-3 draft for a class the release cannot serve it with fails at start-up, whatever the draft."""
    support = target_support(view)
    if support is None or view.algorithm.upper() != "EAGLE3":
        return
    refusal = support.refusal()
    if refusal is not None:
        yield Finding(
            E,
            "TARGET_EAGLE3_UNSUPPORTED",
            refusal,
            f"serve this target with an SGLang release whose class defines {CAPTURE_METHOD} "
            "(eyas doctor --sglang-version), or draft for another target",
        )
        return
    unknown = support.unknown_rule()
    if unknown:
        yield Finding(W, "CAPTURE_RULE_UNKNOWN", f"{unknown}: the captured layers were not checked")
    elif not support.rule_read:
        yield Finding(I, "CAPTURE_RULE_INHERITED", f"{support.architecture}: {support.rule_note}")


def check_aux_capture(view: DraftView) -> Iterator[Finding]:
    """The layers (and tensor) the serving class captures for the saved ids, against the trained ones."""
    support, target = target_support(view), view.target
    if support is None or target is None or support.id_rule is None or view.algorithm.upper() != "EAGLE3":
        return
    ids = aux_layer_ids(view.config)
    captured = support.layers_for(ids, target.num_layers)
    bad = [i for i in captured if not 0 <= i <= target.num_layers - 1]
    if bad:
        yield Finding(
            E,
            "AUX_LAYER_IDS",
            f"SGLang {support.release}'s {support.architecture} captures before layers {captured} for ids "
            f"{ids} ({_rule(support)}); {bad} lie outside its {target.num_layers} layers",
            "give ids whose captured layers lie in 1..N-1",
        )
        return
    trained, kind = trained_capture(view.config)
    yield from _layers_against_trained(support, ids, captured, trained)
    yield from _kind_against_trained(support, kind)


def _layers_against_trained(
    support: TargetSupport, ids: list[int] | None, captured: list[int], trained: list[int] | None
) -> Iterator[Finding]:
    said = f"SGLang {support.release}'s {support.architecture} captures layers {captured} for ids {ids}"
    if trained is not None:
        if sorted(trained) != captured:
            yield Finding(
                E,
                "AUX_LAYERS_SHIFTED",
                f"{said} ({_rule(support)}), but the draft was trained on layers {sorted(trained)}: it would "
                "be served other states than it learned from (no error, low acceptance)",
                _fix(support, trained),
            )
        return
    usual = [i + 1 for i in ids] if ids is not None else captured
    if captured != usual:
        yield Finding(
            W,
            "AUX_LAYERS_SHIFTED",
            f"{said} ({_rule(support)}), not the layers {usual} these ids name by the usual convention "
            f"(id + 1): a draft trained on the outputs of decoder layers {ids} gets states a layer off",
            _fix(support, usual),
        )


def _kind_against_trained(support: TargetSupport, kind: CaptureKind | None) -> Iterator[Finding]:
    serving = support.captures
    if serving is None or kind == serving:
        return
    said = f"SGLang {support.release}'s {support.architecture} hands the draft {CAPTURE_TEXT[serving]}"
    if kind is not None:
        yield Finding(
            E,
            "AUX_CAPTURE_MISMATCH",
            f"{said}; the draft was trained on {CAPTURE_TEXT[kind]} (no error, low acceptance)",
            RETRAIN,
        )
    elif serving is not CaptureKind.RESIDUAL_STREAM:
        yield Finding(
            W,
            "AUX_CAPTURE_MISMATCH",
            f"{said}, not the residual stream (HF's hidden_states) most trainers store; this draft does not "
            "say what it was trained on",
            "check what the trainer captured; eyas extracts what the serving class captures",
        )


def _rule(support: TargetSupport) -> str:
    return f"its id rule: {ID_RULE_TEXT[support.id_rule]}" if support.id_rule else "its rule is unknown"


def _fix(support: TargetSupport, layers: list[int]) -> str:
    try:
        ids = support.ids_for(layers)
    except ValueError as exc:
        return f"{exc}; retrain on layers this class can capture"
    return (
        f"write eagle_config.eagle_aux_hidden_state_layer_ids = {ids} (the ids that capture {sorted(layers)})"
    )


TARGET_CHECKS = (check_target_class, check_aux_capture)
