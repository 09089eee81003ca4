"""The target (verifier) model as the draft checks need it: sizes, rope, context length."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drafting.checkpoint.errors import CheckpointError
from drafting.checkpoint.source import read_json
from drafting.sglang_facts import context_length, rope_scaling

ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters")


@dataclass(frozen=True)
class TargetModel:
    config_path: Path
    architectures: tuple[str, ...]
    hidden_size: int
    vocab_size: int
    num_layers: int
    rope: dict[str, Any]  # the rope keys the target config has, as written
    context_length: int
    max_position_embeddings: int | None
    dtype: str | None
    # The language model's config as SGLang reads it (text_config of a multimodal target, with the
    # parent's dtype when it states none, as sglang's get_hf_text_config does): what its dtype comes from.
    serving_config: dict[str, Any] = field(default_factory=dict, compare=False)


def resolve_config_path(path: Path) -> Path:
    """A model folder (config.json inside) or a config.json path itself."""
    return path / "config.json" if path.is_dir() else path


def load_target(path: Path) -> TargetModel:
    config_path = resolve_config_path(path)
    config = read_json(config_path, "target config")
    # Multimodal targets keep the language model's sizes in text_config.
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    try:
        hidden = int(text["hidden_size"])
        vocab = int(text["vocab_size"])
        layers = int(text["num_hidden_layers"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{config_path}: target config lacks hidden_size, vocab_size or num_hidden_layers",
            path=config_path,
        ) from exc
    max_pos = text.get("max_position_embeddings")
    return TargetModel(
        config_path=config_path,
        architectures=tuple(str(a) for a in config.get("architectures") or ()),
        hidden_size=hidden,
        vocab_size=vocab,
        num_layers=layers,
        rope={key: text[key] for key in ROPE_KEYS if key in text},
        context_length=context_length(text),
        max_position_embeddings=int(max_pos) if isinstance(max_pos, int) else None,
        dtype=text.get("dtype")
        or text.get("torch_dtype")
        or config.get("dtype")
        or config.get("torch_dtype"),
        serving_config=_serving_config(config, text),
    )


def _serving_config(config: dict[str, Any], text: dict[str, Any]) -> dict[str, Any]:
    if text is config or text.get("dtype") or text.get("torch_dtype"):
        return dict(text)
    inherited = config.get("dtype") or config.get("torch_dtype")
    return {**text, "dtype": inherited} if inherited else dict(text)


def effective_rope(config: dict[str, Any]) -> dict[str, Any]:
    """Rope settings reduced to what changes the frequencies, comparable across config styles."""
    scaling = dict(rope_scaling(config) or {})
    theta = config.get("rope_theta", scaling.pop("rope_theta", None))
    scaling.pop("rope_theta", None)
    kind = scaling.pop("rope_type", scaling.pop("type", "default"))
    return {"rope_theta": float(theta) if theta is not None else 10000.0, "rope_type": kind, **scaling}
