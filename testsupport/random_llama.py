"""Random Llama targets of a real model's shape, with the demo's word-level tokenizer and chat template, and
long conversations for them: what the GPU checks and the GPU benchmarks extract from and train on."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from cli.demo.constructed import build_tokenizer, chat, write_jsonl

# About 1.5 B parameters: Llama's layout at hidden 2048, 16 layers, and a Llama-3-sized vocabulary.
LLAMA_1_5B: dict[str, Any] = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 4096,
}
# The same stack with a 32k vocabulary: a drafter's lm_head rows come from the target's, and a 128k-row head
# would dominate a training step of this size.
LLAMA_1_5B_VOCAB_32K: dict[str, Any] = {**LLAMA_1_5B, "vocab_size": 32000}


def save_random_llama(folder: Path, shape: dict[str, Any], *, seed: int = 0) -> Path:
    """A random bf16 Llama of `shape` saved with the demo tokenizer (the stages read a target folder)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**shape))
    model.bfloat16().save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


def long_conversations(path: Path, count: int, words: int, *, seed: int = 0) -> Path:
    """`count` one-turn conversations of `words` words a turn (about 2 tokens a word, demo tokenizer)."""
    rng = random.Random(seed)
    return write_jsonl(path, [chat(rng, turns=1, words=words) for _ in range(count)])
