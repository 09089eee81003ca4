"""Tiny targets for the ML tests: random-weight Llamas built from a config, no downloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

TINY_TARGET: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rope_theta": 500000.0,
}


def make_target(**overrides: Any) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(**{**TINY_TARGET, **overrides})
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def tiny_target() -> LlamaForCausalLM:
    return make_target()


@pytest.fixture
def target_dir(tmp_path: Path, tiny_target: LlamaForCausalLM) -> Path:
    folder = tmp_path / "target"
    tiny_target.save_pretrained(folder)
    return folder


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    """Tiny ops on a shared 2-core box: intra-op threads only spin against each other (7x slower here)."""
    torch.set_num_threads(1)
