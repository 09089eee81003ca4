"""What every doctor check reads: the draft as SGLang would see it, the rules row and the target."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from drafting.checkpoint.layout import (
    ConfigFieldMissing,
    DraftSpec,
    ExpectedParam,
    Placement,
    draft_spec,
    expected_parameters,
    resolve_name,
)
from drafting.checkpoint.safetensors_io import TensorEntry
from drafting.checkpoint.sglang_reading import SGLangReading, read_as_sglang
from drafting.checkpoint.target import TargetModel
from drafting.sglang_facts import SGLangRules

SPECULATORS_LAYER_CONFIG = "transformer_layer_config"


def is_speculators_config(config: Mapping[str, Any]) -> bool:
    return isinstance(config.get(SPECULATORS_LAYER_CONFIG), dict) or "speculators_model_type" in config


def sizing_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config the sizes are read from: speculators nests them in transformer_layer_config.

    SGLang itself reads only the top level, so a nested config fails there (ARCHITECTURE says so);
    the sizes still let the doctor check every tensor instead of stopping at the first problem.
    """
    flat = dict(config)
    nested = config.get(SPECULATORS_LAYER_CONFIG)
    if isinstance(nested, dict):
        for key, value in nested.items():
            flat.setdefault(key, value)
        # speculators' top-level `tie_word_embeddings` describes the verifier; the draft's is its own.
        flat["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", False))
    return flat


@dataclass
class DraftView:
    """A draft to check: its config as written, its tensors, the SGLang rules and the target."""

    label: str
    config: dict[str, Any]
    tensors: dict[str, TensorEntry]
    rules: SGLangRules
    version: str
    algorithm: str
    target: TargetModel | None = None
    files: list[str] = field(default_factory=list)

    @cached_property
    def sizes(self) -> dict[str, Any]:
        return sizing_config(self.config)

    @cached_property
    def reading(self) -> SGLangReading:
        """The dtype and context length SGLang derives from config.json as written (top level only)."""
        return read_as_sglang(self.config)

    @cached_property
    def target_reading(self) -> SGLangReading | None:
        return read_as_sglang(self.target.serving_config) if self.target is not None else None

    @cached_property
    def spec(self) -> DraftSpec | None:
        try:
            return draft_spec(self.sizes, self.rules)
        except ConfigFieldMissing:
            return None

    @cached_property
    def missing_fields(self) -> list[str]:
        try:
            draft_spec(self.sizes, self.rules)
        except ConfigFieldMissing as exc:
            return exc.fields
        return []

    @cached_property
    def params(self) -> dict[str, ExpectedParam]:
        return expected_parameters(self.spec, self.rules) if self.spec else {}

    @cached_property
    def placements(self) -> dict[str, Placement]:
        return {name: resolve_name(name, self.rules, self.params) for name in sorted(self.tensors)}

    def option(self, key: str) -> Any:
        """A draft option as SGLang reads it: eagle_config first, then the top level."""
        eagle = self.config.get("eagle_config")
        if isinstance(eagle, dict) and key in eagle:
            return eagle[key]
        return self.sizes.get(key)
