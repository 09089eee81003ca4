"""Held-out prompts: the evaluation sets a drafter is judged on must not be among the prompts it is trained
from. A training record (or a self-written user turn) whose user turn equals a held-out one, after folding
case, punctuation and spacing, is dropped with reason `overlaps_holdout`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from drafting.generation.inputs import Conversation, Rejected
from drafting.generation.self_prompts import normalise
from drafting.prompting.named import resolve_source
from drafting.prompting.records import RecordError, parse_line
from drafting.userfiles import Cap, iter_user_lines


@dataclass(frozen=True)
class HeldOut:
    sources: tuple[str, ...]
    turns: frozenset[str]  # every user turn of the held-out sets, normalised

    def overlap(self, conversation: Conversation) -> str | None:
        """The first of the conversation's user turns that is held out, or None."""
        for message in conversation.messages:
            if message["role"] == "user" and normalise(message["content"]) in self.turns:
                return message["content"]
        return None


def load_holdout(sources: Sequence[str]) -> HeldOut:
    """Read every held-out set now, so a bad one fails the job before any server starts (ValueError)."""
    turns: set[str] = set()
    for source in sources:
        path = resolve_source(source)
        for number, line in iter_user_lines(path, Cap.DATASET, "held-out prompt set", Cap.LINE):
            if not line.strip():
                continue
            try:
                record = parse_line(line)
            except RecordError as error:
                raise ValueError(f"{source}:{number}: {error}") from error
            turns.update(normalise(turn) for turn in record.user_turns)
    turns.discard("")
    return HeldOut(tuple(sources), frozenset(turns))


def without_held_out(
    items: Iterable[Conversation | Rejected], held_out: HeldOut
) -> Iterator[Conversation | Rejected]:
    """The prompt set with held-out records turned into rejections (the rest passes through in order)."""
    for item in items:
        found = held_out.overlap(item) if isinstance(item, Conversation) else None
        if found is None:
            yield item
            continue
        yield Rejected(item.line or 0, "overlaps_holdout", f"user turn {found[:80]!r} is in a held-out set")
