"""Openers: the first words of self-written user turns, so that a target writing its own prompts covers the
kinds of request users send, not only the one it drifts to.

Left to itself, a small instruct model's user turns are mostly one kind: SmolLM2-135M-Instruct, sampled at
temperature 1 from its user-turn prefix alone, wrote 24 of 24 advice and how-to questions ("Can you
provide…", "I'm preparing for…") and no maths, code, role play or extraction (a sample on a CPU). A
drafter trained on such turns meets other kinds of request at serving time. Magpie conditions its
self-written instructions the same way, with a task-specific system prompt; an opener does it with the
user turn's own first words, which needs nothing from the template but its user-turn prefix.

The `tasks` set below is eyas's own wording, a handful of openers for each kind of request that chat
benchmarks group by (writing, role play, reasoning, maths, code, extraction, science, humanities). It holds
no benchmark's text; held-out sets are still checked turn by turn (`holdout_prompts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

TASK_OPENERS: dict[str, tuple[str, ...]] = {
    "writing": (
        "Write a short story about",
        "Write a persuasive email to",
        "Compose a poem that",
        "Draft a blog post on",
    ),
    "roleplay": (
        "Pretend you are",
        "Imagine you are a",
        "You are a tour guide in",
        "Act as a job interviewer and",
    ),
    "reasoning": ("If all", "A farmer has", "Which of these statements is true:", "Is it possible that"),
    "math": ("Solve for x:", "Calculate the area of", "What is the probability that", "Prove that"),
    "coding": (
        "Write a Python function that",
        "Implement a",
        "Fix the bug in this code:",
        "Write a SQL query that",
    ),
    "extraction": (
        "Extract the names and dates from",
        "From the following text, list",
        "Summarize this paragraph:",
        "Turn this data into a table:",
    ),
    "stem": ("Explain how", "What is the difference between", "Why does", "Describe the process of"),
    "humanities": (
        "Discuss the causes of",
        "Compare the philosophies of",
        "What was the impact of",
        "Analyze the theme of",
    ),
}


def resolve(openers: Sequence[str] | Literal["tasks"]) -> tuple[str, ...]:
    """The openers a run takes in turn: a named set's, interleaved across its kinds (a short run still
    covers every kind), or the given list as it is."""
    if openers == "tasks":
        kinds = list(TASK_OPENERS.values())
        return tuple(kind[i] for i in range(max(map(len, kinds))) for kind in kinds if i < len(kind))
    return tuple(openers)
