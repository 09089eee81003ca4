"""Conversations for the constructed successor target (cli/demo/constructed.py): its greedy next word is
a fixed successor of the current one, so these assistant turns are what the target itself would answer."""

from __future__ import annotations

import random
from typing import Any

from cli.demo.constructed import WORDS, sentence


def successor_chat(rng: random.Random, turns: int = 3, words: int = 20) -> dict[str, Any]:
    """User turns of random words; assistant turns that follow the successor rule, as the target's own greedy
    answers do (regenerated data, the field's recipe): a drafter trained on random assistant words learns
    little of the chains the sweep's prompts continue into."""
    messages = []
    for _ in range(turns):
        start = rng.randrange(len(WORDS))
        chain = " ".join(WORDS[(start + step) % len(WORDS)] for step in range(words))
        messages.append({"role": "user", "content": sentence(rng, words)})
        messages.append({"role": "assistant", "content": chain})
    return {"messages": messages}
