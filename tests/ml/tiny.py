"""Tiny targets for the tests: the demo assets (workers/ml/demo_assets.py) plus random ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from workers.ml.demo_assets import (
    CHAT_TEMPLATE,
    SPECIALS,
    TINY_CONFIG,
    WORDS,
    build_tokenizer,
    chat,
    sentence,
    successor,
    write_jsonl,
)
from workers.ml.demo_assets import successor_target as _demo_target

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIALS",
    "TINY_CONFIG",
    "WORDS",
    "build_tokenizer",
    "chat",
    "random_target",
    "save_target",
    "sentence",
    "successor",
    "successor_target",
    "write_jsonl",
]


def save_target(folder: Path, model: LlamaForCausalLM) -> Path:
    model.save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


def random_target(folder: Path, seed: int = 0, **overrides: Any) -> Path:
    torch.manual_seed(seed)
    return save_target(folder, LlamaForCausalLM(LlamaConfig(**{**TINY_CONFIG, **overrides})).eval())


def successor_target(folder: Path) -> Path:
    """The tests' successor target: hidden 64, 8 layers (as the demo's)."""
    return _demo_target(folder, hidden=64)
