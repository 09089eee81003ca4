"""Tiny targets for the tests: the demo assets (cli/demo/constructed.py) plus random ones."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cli.demo.constructed import (
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
from cli.demo.constructed import successor_target as _demo_target
from contract.params.train import TrainParams

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIALS",
    "TINY_CONFIG",
    "WORDS",
    "build_tokenizer",
    "chat",
    "cpu_train_params",
    "random_target",
    "save_target",
    "sentence",
    "successor",
    "successor_extraction",
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


def successor_extraction(
    root: Path, *, conversations: int, turns: int, words: int | list[int], seed: int, max_len: int
) -> tuple[Path, Path]:
    """(target, extraction) of the successor task: conversations made and extracted on the CPU. A list of
    `words` gives the conversations those lengths in turn (samples of several lengths)."""
    from contract.params.extract import ExtractParams
    from drafting.context import StageContext
    from drafting.stages import extract

    target = successor_target(root / "target")
    rng = random.Random(seed)
    lengths = words if isinstance(words, list) else [words]
    chats = [chat(rng, turns=turns, words=lengths[i % len(lengths)]) for i in range(conversations)]
    data = write_jsonl(root / "data.jsonl", chats)
    params = ExtractParams(
        target=str(target),
        data=str(data),
        output=str(root / "hs"),
        device="cpu",
        dtype="float32",
        max_len=max_len,
    )
    extract.run(StageContext(work_dir=root), params)
    return target, root / "hs"


def cpu_train_params(target: Path, data: Path, output: Path, **values: Any) -> TrainParams:
    """TrainParams for a CPU test: float32, no loader processes; the test names everything else (and may
    override these)."""
    defaults = {"device": "cpu", "dtype": "float32", "loader_workers": 0}
    return TrainParams(target=str(target), data=str(data), output=str(output), **{**defaults, **values})
