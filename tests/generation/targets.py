"""A constructed chat target for the generate tests: the demo's successor Llama (each word is followed by the
next one in WORDS) that also ends its turn, with `<|end|>` (the demo template's end-of-turn token), at a
chosen probability after every word.

Sampled at temperature 1 its turns are "w0", "w0 w1", "w0 w1 w2", … (it starts every turn at w0, the
successor of a special token) of geometric length: short, ended by the end-of-turn token, and often the
same, which is what deduplication and the length filter need. Decoded greedily it never ends a turn (the
successor always wins), so every answer runs to max_new_tokens.
"""

from __future__ import annotations

import math
from pathlib import Path

from safetensors.torch import load_file, save_file

from cli.demo.constructed import SPECIALS, WORDS, successor_target

END_ID = SPECIALS.index("<|end|>")
HIDDEN = 64


def chatty_target(folder: Path, *, end_probability: float = 0.3) -> Path:
    successor_target(folder, hidden=HIDDEN)
    weights_file = folder / "model.safetensors"
    weights = load_file(weights_file)
    head_key = "lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"
    head = weights[head_key].clone()
    embed = weights["model.embed_tokens.weight"]
    # After word w the successor's logit is 0.25·|normed(w)|² = 0.25·HIDDEN; the end token gets the same
    # less log((1-p)/p), so softmax over the two gives it probability p.
    gap = math.log((1 - end_probability) / end_probability)
    scale = (0.25 * HIDDEN - gap) / HIDDEN
    normed = embed / embed.norm(dim=1, keepdim=True) * HIDDEN**0.5
    first = len(SPECIALS)
    head[END_ID] = scale * normed[first : first + len(WORDS)].sum(dim=0)
    weights[head_key] = head
    save_file(weights, weights_file, metadata={"format": "pt"})
    return folder


def answer_words(count: int, start: int = 0) -> str:
    """The successor chain the target answers greedily: w{start} w{start+1} …"""
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(count))
