"""The transformers side of the support matrix: where a target's text model sits, and whether loading it
needs the checkpoint's own code.

Read from the installed transformers: a class it ships under the target's architecture name names its input
embedding in `_tied_weights_keys` (the head is `lm_head.weight`): the parameter's name in the loaded model
(a multimodal class keeps its text model under `model.language_model.`). Checkpoints may store it under an
older name that transformers' conversion_mapping.py renames on load: transformers 5's own `save_pretrained`
writes Llava-style and Gemma3 multimodal weights as `language_model.model.*`. A config with `auto_map` names
code of the checkpoint's own; it must run only where transformers ships neither the architecture nor its
model type (nor the text model's, for a wrapper).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class RemoteCode(StrEnum):
    NONE = "none"  # no auto_map: transformers' own classes
    NOT_NEEDED = "not needed"  # auto_map, but transformers ships the model (or its text model)
    REQUIRED = "required"  # auto_map, and transformers knows neither: trust_remote_code must be allowed


@dataclass(frozen=True)
class TextPlacement:
    nested_config: str | None  # "text_config" when the text model's fields are nested there
    transformers_class: str | None  # the class transformers ships under the architecture's name
    embedding: str | None  # the input embedding's parameter name in transformers' loaded model
    head: str | None
    remote_code: RemoteCode


@functools.cache
def _transformers_names() -> frozenset[str]:
    import transformers

    return frozenset(dir(transformers))  # the lazy module lists its names without importing them


@functools.cache
def _model_types() -> frozenset[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return frozenset(CONFIG_MAPPING_NAMES)


def ships(architecture: str) -> bool:
    """Whether transformers ships a class under this name."""
    return architecture in _transformers_names()


@functools.cache
def class_weights(architecture: str) -> tuple[str | None, str | None]:
    """(embedding, head) parameter names in transformers' class `architecture` as loaded; (None, None)
    without one."""
    if architecture not in _transformers_names():
        return None, None
    import transformers

    tied = getattr(getattr(transformers, architecture), "_tied_weights_keys", None)
    if isinstance(tied, Mapping) and "lm_head.weight" in tied:
        return str(tied["lm_head.weight"]), "lm_head.weight"
    return None, None


def placement(config: Mapping[str, Any]) -> TextPlacement:
    """Where the text model of a target config lives, and whether its code must run."""
    archs = config.get("architectures")
    architecture = str(archs[0]) if isinstance(archs, list) and archs else ""
    nested = config.get("text_config")
    shipped = architecture in _transformers_names()
    embedding, head = class_weights(architecture)
    return TextPlacement(
        nested_config="text_config" if isinstance(nested, Mapping) else None,
        transformers_class=architecture if shipped else None,
        embedding=embedding,
        head=head,
        remote_code=_remote_code(config, shipped),
    )


def _remote_code(config: Mapping[str, Any], shipped: bool) -> RemoteCode:
    if not isinstance(config.get("auto_map"), Mapping):
        return RemoteCode.NONE
    nested = config.get("text_config")
    text_types = {str(nested.get("model_type"))} if isinstance(nested, Mapping) else set()
    text_archs = nested.get("architectures") if isinstance(nested, Mapping) else None
    text_shipped = (
        isinstance(text_archs, list) and bool(text_archs) and text_archs[0] in _transformers_names()
    )
    known = shipped or text_shipped or bool({str(config.get("model_type")), *text_types} & _model_types())
    return RemoteCode.NOT_NEEDED if known else RemoteCode.REQUIRED
