"""Magpie-style user turns: which ones the target wrote are kept.

The target is sent its chat template's user-turn prefix alone, or followed by an opener (the user turn's
first words, drafting/generation/openers.py, taken in turn by attempt), and continues it with a user
message, which ends at the template's end-of-turn token. A user turn is kept when it ended there (one cut by
the token limit is half a question), its length is within [min_chars, max_chars], and neither it nor its
normalised form (case, punctuation and spacing folded) was kept before: sampled prompts repeat a lot, and a
repeated prompt teaches a drafter nothing new.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from contract.params.generate import SelfPromptParams
from drafting.generation.client import Completion
from drafting.generation.openers import resolve

_NOT_WORD = re.compile(r"[\W_]+")


def normalise(text: str) -> str:
    return _NOT_WORD.sub(" ", text.casefold()).strip()


def joined(opener: str, text: str) -> str:
    """An opener and the text the target wrote after it, without their token ids: a word right after the
    opener most likely had its space (decoded alone, a continuation's first token can lose it)."""
    if not opener:
        return text
    return opener + (" " if text[:1].isalnum() else "") + text


@dataclass
class SelfPromptPlan:
    """How many user turns are still wanted and how many may be sampled; the runner moves the counters."""

    params: SelfPromptParams
    needed: int  # params.count less those a previous run wrote
    first_index: int
    seen: set[str] = field(default_factory=set)  # kept user turns, exactly
    seen_normalised: set[str] = field(default_factory=set)
    held_out: frozenset[str] = frozenset()  # normalised user turns of the held-out evaluation sets
    openers: tuple[str, ...] = ()  # user-turn beginnings, one per attempt in turn (none: the target starts)
    attempted: int = 0
    in_flight: int = 0
    kept: int = 0

    @classmethod
    def resumed(cls, params: SelfPromptParams, written: Iterable[str], next_index: int) -> SelfPromptPlan:
        texts = list(written)
        needed = max(params.count - len(texts), 0)
        seen = {normalise(text) for text in texts}
        return cls(params, needed, next_index, set(texts), seen, openers=resolve(params.openers))

    def opener(self, index: int) -> str:
        """The opener of attempt `index` ("" without openers): by index, so a resumed run continues the
        rotation where the last one stopped."""
        return self.openers[index % len(self.openers)] if self.openers else ""

    @property
    def more_wanted(self) -> bool:
        return self.kept + self.in_flight < self.needed and self.attempted < self.params.attempts

    def judge(
        self, completion: Completion, opener: str = "", written: str | None = None
    ) -> tuple[str | None, str]:
        """(reason to drop or None, the user turn); `written` is the turn as decoded with its opener
        (runner.user_turn; default: `joined`). A kept turn is remembered for deduplication at once, so two
        attempts in flight cannot both keep the same prompt."""
        text = (joined(opener, completion.text) if written is None else written).strip()
        params = self.params
        if completion.finish != "stop":
            return "prompt_truncated", f"no end of turn within {params.max_new_tokens} tokens: {text[:80]!r}"
        if not completion.text.strip():
            after = f" after the opener {opener!r}" if opener else ""
            return "prompt_empty", f"the target wrote no text{after}"
        if len(text) < params.min_chars:
            return "prompt_too_short", f"{len(text)} characters < min_chars {params.min_chars}: {text!r}"
        if len(text) > params.max_chars:
            return "prompt_too_long", f"{len(text)} characters > max_chars {params.max_chars}"
        if text in self.seen:
            return "prompt_duplicate", f"{text[:80]!r} was kept already"
        folded = normalise(text)
        if folded in self.seen_normalised:
            return "prompt_near_duplicate", f"{text[:80]!r}: the same words as a kept one"
        if folded in self.held_out:
            return "overlaps_holdout", f"{text[:80]!r} is a user turn of a held-out evaluation set"
        self.seen.add(text)
        self.seen_normalised.add(folded)
        return None, text
