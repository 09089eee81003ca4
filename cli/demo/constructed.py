"""A tiny, fully local EAGLE-3 playground: a target, its tokenizer, conversations and prompts.

The target is a constructed Llama whose greedy next token is a fixed successor of the current word (every
block's output projections are zero, so the residual stream stays the token's embedding, and lm_head maps
each embedding to its successor). A drafter can learn it, so acceptance shows at once whether a drafter's
weights were trained, converted and loaded. It makes `eyas demo` and the tests independent of any model
hub. Figures from it are plumbing checks, not quality claims.
"""

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


def successor(token_id: int) -> int:
    """The learnable rule: each word is followed by the next one in WORDS, anything else by the first."""
    first = len(SPECIALS)
    if first <= token_id < first + len(WORDS):
        return first + (token_id - first + 1) % len(WORDS)
    return first


@torch.no_grad()
def successor_target(
    folder: Path,
    *,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    layers: int = 8,
    intermediate: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Path:
    """Save a Llama whose greedy next token is `successor(current token)`, with its tokenizer. `device` is
    where it is built: a 7B shape takes minutes to initialise on a CPU and seconds on a GPU."""
    torch.manual_seed(0)
    config = LlamaConfig(
        **{
            **TINY_CONFIG,
            "hidden_size": hidden,
            "intermediate_size": intermediate or 2 * hidden,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "num_hidden_layers": layers,
            "max_position_embeddings": 4096,
        }
    )
    with torch.device(device):
        model = LlamaForCausalLM(config).eval()
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    # orthonormal columns, one per token
    basis, _ = torch.linalg.qr(torch.randn(hidden, config.vocab_size, device=device))
    model.model.embed_tokens.weight.copy_(basis.T * 0.05)
    normed = basis.T * hidden**0.5  # what the final RMS norm makes of each embedding
    model.lm_head.weight.zero_()
    for token in range(config.vocab_size):
        model.lm_head.weight[successor(token)] += 0.25 * normed[token]
    model.to(dtype).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


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


def chat_prompt(text: str) -> dict[str, Any]:
    """A user turn the benchmark renders with the target's chat template, as chat traffic and the training
    conversations are. Sent as raw text, without the template, the prompts are text no training sample
    looks like. The demo's drafter trained with `norm_output` (the default) then accepted 1.55 at depth 3,
    the pre-norm one 2.61. As chat turns the two accept 4.00 and 3.77 (eyas eval, 4 prompts, 24 tokens;
    a constructed target: the size of the effect, not a quality figure).
    Until this changed, the demo kept `norm_output` off, for a cause misread as the recipe's."""
    return {"messages": [{"role": "user", "content": text}]}


def write_demo(folder: Path, *, conversations: int = 48, prompts: int = 8, seed: int = 0) -> dict[str, str]:
    """A target, a conversation file and a prompt set under `folder`; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    target = successor_target(folder / "target")
    data = write_jsonl(folder / "chats.jsonl", [chat(rng, turns=2, words=12) for _ in range(conversations)])
    prompt_set = write_jsonl(
        folder / "prompts.jsonl", [chat_prompt(sentence(rng, 12)) for _ in range(prompts)]
    )
    return {"target": str(target), "data": str(data), "prompts": str(prompt_set)}


def demo_pipeline_spec(assets: dict[str, str], *, workdir: str) -> dict[str, Any]:
    """An eagle3 pipeline over the demo assets, sized for a CPU (the reference engine instead of SGLang)."""
    train = {
        "device": "cpu",
        "dtype": "float32",
        "epochs": 4,
        "batch_size": 2,
        "max_len": 64,
        "draft_vocab_size": 64,
        "lr": 1e-2,
        "warmup_steps": 0,
        "init_lm_head": "random",
        "ttt_steps": 3,
        "loader_workers": 0,
    }
    sweep = {
        "depths": [5, 3],
        "prompts": assets["prompts"],
        "max_prompts": 4,
        "max_new_tokens": 24,
        "repeats": 3,  # 5 rounds (the default) × 2 depths of the reference engine are minutes on a CPU
        # the reference engine on a CPU re-drafts without a KV cache, so it is slower than plain
        # decoding whatever the acceptance: no speedup asked for here (keep 1.0 with SGLang on a GPU)
        "warmup_requests": 0,
        "speedup_threshold": 0.0,
        "launch": {"engine": "reference"},
    }
    return {
        "template": "eagle3",
        "target": assets["target"],
        "data": assets["data"],
        "workdir": workdir,
        "extract": {"device": "cpu", "dtype": "float32", "max_len": 64, "batch_size": 8},
        "train": train,
        "eval": {
            "device": "cpu",
            "depths": [5, 3],
            "prompts": assets["prompts"],
            "max_prompts": 4,
            "max_new_tokens": 24,
        },
        "benchmark": sweep,
    }
