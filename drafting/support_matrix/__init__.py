"""One support matrix: for a target class and an SGLang release, can SGLang serve EAGLE-3 for it, and how.

`support_for(target_config, release)` answers from the release's own model classes (the installed sglang's
files when that is the release asked about, else the table recorded from that release's wheel; see
`releases`): whether the class defines `set_eagle3_layers_to_capture`, how it maps the draft's aux-layer ids
to capture points (`rules.IdRule`), what it captures there (`rules.CaptureKind`), and its default layers.
`text_model.placement` adds the transformers side (text config, embedding and head, remote code).
eyas's extraction, the drafter config, the doctor and the launch checks all ask here, so they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from drafting.support_matrix.releases import AnsweringTable, table_for
from drafting.support_matrix.rules import (
    CAPTURE_TEXT,
    ID_RULE_TEXT,
    CaptureKind,
    DefaultLayers,
    IdRule,
    default_layers,
    ids_for_layers,
    layers_to_capture,
)
from drafting.support_matrix.scan import CAPTURE_METHOD

__all__ = [
    "AUX_CAPTURE_KEY",
    "CAPTURE_METHOD",
    "CaptureKind",
    "DefaultLayers",
    "IdRule",
    "TargetSupport",
    "support_for",
    "support_for_architecture",
    "trained_capture",
]

# What SGLang loads for an architecture it has no class for (models/registry.py `_normalize_archs`).
FALLBACK_CLASS = "TransformersForCausalLM"
# What eyas trained a draft on, in the draft's config.json beside SGLang's fields (SGLang reads only the keys
# it knows): {"layers": HF indices, "captures": CaptureKind, "target_architecture", "sglang_version"}. The
# doctor compares it with what the serving class captures for the saved ids; eval captures the same states.
AUX_CAPTURE_KEY = "eyas_aux_capture"


def trained_capture(draft_config: Mapping[str, Any]) -> tuple[list[int] | None, CaptureKind | None]:
    """(layers, kind) eyas recorded in a draft config; (None, None) for a draft eyas did not train."""
    recorded = draft_config.get(AUX_CAPTURE_KEY)
    if not isinstance(recorded, dict):
        return None, None
    layers = recorded.get("layers")
    kind = recorded.get("captures")
    return (
        [int(i) for i in layers] if isinstance(layers, list) else None,
        CaptureKind(kind) if kind in {k.value for k in CaptureKind} else None,
    )


@dataclass(frozen=True)
class TargetSupport:
    """What one SGLang release does with one target class when it serves an EAGLE-3 draft."""

    architecture: str
    release: str  # the release asked about
    origin: str  # the table that answered, in words
    exact: bool  # False: an earlier release's table answered
    module: str | None  # SGLang module defining the class; None: SGLang has no such class
    hook: str | None  # "module.Class" defining set_eagle3_layers_to_capture; None: EAGLE-3 refused
    id_rule: IdRule | None = None
    captures: CaptureKind | None = None
    default: DefaultLayers | None = None
    rule_read: bool = False  # the class's own module was read too (not only its hook class's)
    rule_note: str = ""

    @property
    def serves_eagle3(self) -> bool:
        return self.hook is not None

    @property
    def known(self) -> bool:
        return self.module is not None

    def refusal(self) -> str | None:
        """Why this release cannot serve an EAGLE-3 draft for the class (None when it can)."""
        if self.hook is not None:
            return None
        where = f"SGLang {self.release}" + ("" if self.exact else f" (answered by {self.origin})")
        if self.module is None:
            return (
                f"{where} has no model class named {self.architecture}: it would load {FALLBACK_CLASS}, "
                f"which does not define {CAPTURE_METHOD}, and an EAGLE-3 server refuses to start"
            )
        return (
            f"{where} cannot serve EAGLE-3 for {self.architecture}: its class (models/{self.module}.py) "
            f"does not define {CAPTURE_METHOD}, and an EAGLE-3 server refuses to start"
        )

    def unknown_rule(self) -> str:
        """Why eyas cannot say which states the class captures (empty when it can)."""
        if self.id_rule is not None or self.hook is None:
            return ""
        return f"SGLang {self.release}'s {self.architecture}: {self.rule_note}"

    def layers_for(self, ids: list[int] | None, num_layers: int) -> list[int]:
        """The layers (HF hidden-state indices) this class captures for the draft config's ids."""
        if self.id_rule is None or self.default is None:
            raise ValueError(self.refusal() or self.unknown_rule())
        if ids is None:
            return default_layers(self.default, num_layers)
        return layers_to_capture(self.id_rule, ids, num_layers)

    def ids_for(self, layers: list[int]) -> list[int]:
        """The ids to save so that this class captures exactly `layers`; ValueError when none do."""
        if self.id_rule is None:
            raise ValueError(self.refusal() or self.unknown_rule())
        return ids_for_layers(self.id_rule, sorted(layers))

    def describe(self) -> str:
        if self.id_rule is None or self.captures is None:
            return self.refusal() or self.unknown_rule()
        return (
            f"{self.architecture} in SGLang {self.release}: ids map to layers by "
            f"{ID_RULE_TEXT[self.id_rule]}; it captures {CAPTURE_TEXT[self.captures]}"
        )


def architecture_of(config: Mapping[str, Any]) -> str | None:
    """`architectures[0]`: the name SGLang picks the class by."""
    archs = config.get("architectures")
    return str(archs[0]) if isinstance(archs, list) and archs else None


def support_for(config: Mapping[str, Any], release: str) -> TargetSupport | None:
    """The target config's class in `release`; None when the config names no architecture."""
    arch = architecture_of(config)
    return support_for_architecture(arch, release) if arch else None


def support_for_architecture(
    architecture: str, release: str, answering: AnsweringTable | None = None
) -> TargetSupport:
    """`architecture` in `release`, answered by `table_for(release)` unless a table is given."""
    answering = answering or table_for(release)
    entry = answering.table.architectures.get(architecture)
    if entry is None:
        return _support(answering, architecture, None, None)
    module, hook = str(entry["module"]), entry.get("hook")
    if hook is None:
        return _support(answering, architecture, module, None)
    return _with_rule(answering, architecture, module, str(hook))


def _support(answering: AnsweringTable, arch: str, module: str | None, hook: str | None) -> TargetSupport:
    return TargetSupport(arch, answering.asked, answering.origin, answering.exact, module, hook)


def _with_rule(answering: AnsweringTable, arch: str, module: str, hook: str) -> TargetSupport:
    rules = answering.table.rules
    rule, seen = rules.get(hook) or {}, {hook}
    read: set[str] = set()
    while "delegates_to" in rule and rule["delegates_to"] not in seen:
        read.update(rule.get("read") or [])
        seen.add(rule["delegates_to"])
        rule = rules.get(rule["delegates_to"]) or {}
    read.update(rule.get("read") or [])
    base = _support(answering, arch, module, hook)
    if "ids" not in rule:
        why = rule.get("unreadable") or f"the capture rule of {hook} has not been read for this release"
        return replace(base, rule_note=str(why))
    note = "" if module in read else f"rule read in {hook}'s sources, not in models/{module}.py"
    return replace(
        base,
        id_rule=IdRule(rule["ids"]),
        captures=CaptureKind(rule["captures"]),
        default=DefaultLayers(rule["default"]),
        rule_read=module in read,
        rule_note=note,
    )
