"""Tiny targets with a real (word-level) tokenizer and chat template, and conversation files."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["[PAD]", "[UNK]", "<s>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
WORDS = [f"w{i}" for i in range(40)]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 64,
    "max_position_embeddings": 512,
}


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="<|end|>", unk_token="[UNK]", pad_token="[PAD]"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_target(folder: Path, model: LlamaForCausalLM) -> Path:
    model.save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


def random_target(folder: Path, seed: int = 0, **overrides: Any) -> Path:
    torch.manual_seed(seed)
    return save_target(folder, LlamaForCausalLM(LlamaConfig(**{**TINY_CONFIG, **overrides})).eval())


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chat(rng: random.Random, turns: int, words: int = 5, sharegpt: bool = False) -> dict[str, Any]:
    roles = [("user", "human"), ("assistant", "gpt")] * turns
    if sharegpt:
        return {"conversations": [{"from": r[1], "value": sentence(rng, words)} for r in roles]}
    return {"messages": [{"role": r[0], "content": sentence(rng, words)} for r in roles]}


def write_jsonl(path: Path, records: list[Any]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return path


def successor(token_id: int) -> int:
    """The learnable rule: each word is followed by the next one in WORDS, anything else by the first."""
    first = len(SPECIALS)
    if first <= token_id < first + len(WORDS):
        return first + (token_id - first + 1) % len(WORDS)
    return first


@torch.no_grad()
def successor_target(folder: Path) -> Path:
    """A Llama whose greedy next token is `successor(current token)`, with near-certainty.

    Every block's output projections are zeroed, so the residual stream stays the token's embedding; the
    embeddings are orthogonal, so lm_head row v = sum of the (normed) embeddings of v's predecessors scores
    exactly the right successor. The aux states are real forward passes, just simple ones.
    """
    torch.manual_seed(0)
    config = LlamaConfig(**{**TINY_CONFIG, "hidden_size": 64, "intermediate_size": 128})
    model = LlamaForCausalLM(config).eval()
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    orthogonal, _ = torch.linalg.qr(torch.randn(64, 64))
    model.model.embed_tokens.weight.copy_(orthogonal * 0.05)
    normed = orthogonal * 8.0  # unit RMS in 64 dims, what the final norm makes of each embedding
    model.lm_head.weight.zero_()
    for token in range(config.vocab_size):
        model.lm_head.weight[successor(token)] += 0.25 * normed[token]
    return save_target(folder, model)
