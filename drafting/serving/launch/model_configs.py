"""What the launch checks read from the target's and the draft's config.json, by SGLang's rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drafting import sglang_facts as rules
from drafting.support_matrix import support_for
from drafting.userfiles import Cap, UserFileError, read_user_json


def read_config(folder: str | Path) -> dict[str, Any] | None:
    """The folder's config.json, or None when it is missing or not a JSON object.

    A config.json that is a FIFO, a device, a folder or over Cap.CONFIG raises UserFileError naming it:
    reading it would hang or exhaust memory, and SGLang would trip over it the same way."""
    path = Path(folder) / "config.json"
    try:
        loaded = read_user_json(path, Cap.CONFIG, "config.json")
    except UserFileError as exc:
        if exc.problem in ("missing", "invalid", "unreadable"):
            return None
        raise
    return loaded if isinstance(loaded, dict) else None


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model's fields under text_config."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def derived_context_length(config: dict[str, Any]) -> int:
    """SGLang's get_context_length over the language model's part of `config`."""
    return rules.context_length(text_config(config))


def target_layer_count(config: dict[str, Any]) -> int | None:
    layers = text_config(config).get("num_hidden_layers")
    return int(layers) if isinstance(layers, int) else None


def captured_aux_layers(
    target_config: dict[str, Any], draft_config: dict[str, Any], sglang_version: str
) -> list[int] | None:
    """Target layers whose *input* SGLang captures for an EAGLE-3 draft (`layers_to_capture`), by the
    target class's own rule in that release (the support matrix); id + 1 and the default [2, n//2, n-3]
    where the matrix has no rule for the class."""
    layers = target_layer_count(target_config)
    if layers is None:
        return None
    eagle_config = draft_config.get("eagle_config")
    explicit = (
        eagle_config.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle_config, dict) else None
    )
    ids = explicit if isinstance(explicit, list) and all(isinstance(i, int) for i in explicit) else None
    support = support_for(target_config, sglang_version)
    if support is not None and support.id_rule is not None:
        return support.layers_for(ids, layers)
    return [i + 1 for i in ids] if ids is not None else [2, layers // 2, layers - 3]


def env_flag_set(env: dict[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")
