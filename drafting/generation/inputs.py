"""The prompt set, record by record: what each record asks the target (its system and user turns), under a
stable key, or why it cannot be used.

Records are read through drafting.prompting, so a prompt means here what it means in eval and benchmark.
Assistant turns in the input are dropped: they are what generate replaces. The key is the record's own id
(`id`, or MT-Bench's `question_id`) when it has one, else a hash of the turns it asks, so a resumed job
recognises a finished record whatever order the records were written in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from contract.params.text import LONE_SURROGATE, has_lone_surrogate
from drafting.prompting.records import Message, PromptRecord, RecordError, parse_line
from drafting.userfiles import Cap, open_user_file

Source = Literal["prompts", "self_prompts"]
_ASKED_ROLES = ("system", "user")


@dataclass(frozen=True)
class Conversation:
    """A conversation to answer: system and user turns in order; an assistant turn follows each user turn."""

    key: str
    messages: tuple[Message, ...]
    source: Source = "prompts"
    category: str | None = None
    line: int | None = None

    @property
    def user_turns(self) -> int:
        return sum(m["role"] == "user" for m in self.messages)


@dataclass(frozen=True)
class Rejected:
    line: int
    reason: str
    detail: str


def read_prompts(path: Path, *, multi_turn: bool, limit: int | None) -> Iterator[Conversation | Rejected]:
    """Every record of the prompt set (up to `limit` usable ones), in file order; duplicates rejected."""
    seen: set[str] = set()
    usable = 0
    for line_no, text in _lines(path):
        if limit is not None and usable >= limit:
            return
        if isinstance(text, Rejected):
            yield text
            continue
        try:
            conversation = to_conversation(parse_line(text), multi_turn=multi_turn, line=line_no)
        except RecordError as error:
            yield Rejected(line_no, error.reason, error.detail)
            continue
        if conversation.key in seen:
            yield Rejected(line_no, "duplicate", f"key {conversation.key!r} came earlier in the file")
            continue
        seen.add(conversation.key)
        usable += 1
        yield conversation


def to_conversation(record: PromptRecord, *, multi_turn: bool, line: int | None = None) -> Conversation:
    """The turns to ask: system and user messages (assistant ones dropped); with multi_turn false, up to the
    first user turn. RecordError when nothing can be asked."""
    asked: list[Message] = []
    if record.id is not None and has_lone_surrogate(record.id):
        raise RecordError("invalid_text", f"the id holds a {LONE_SURROGATE}")
    for message in record.messages:
        role = message["role"]
        if role == "assistant":
            continue
        if role not in _ASKED_ROLES:
            raise RecordError("unsupported_role", f"a {role} turn: generate answers plain chats only")
        if role == "user" and not message["content"].strip():
            raise RecordError("empty_user_turn", "a user turn has no text")
        if has_lone_surrogate(message["content"]):
            raise RecordError("invalid_text", f"a {role} turn holds a {LONE_SURROGATE}")
        asked.append(message)
        if role == "user" and not multi_turn:
            break
    if not any(m["role"] == "user" for m in asked):
        raise RecordError("no_user_turn", "the record has no user turn to answer")
    messages = tuple(asked)
    return Conversation(record_key(record.id, messages), messages, "prompts", record.category, line)


def record_key(ident: str | None, messages: tuple[Message, ...]) -> str:
    if ident is not None:
        return ident
    canonical = json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]


def count_records(path: Path) -> int:
    """Non-blank lines: the progress total (a usable-record count would need a full parse)."""
    return sum(1 for _, text in _lines(path) if isinstance(text, Rejected) or text.strip())


def _lines(path: Path) -> Iterator[tuple[int, str | Rejected]]:
    """(line number, text) of each non-blank line; an over-long or non-UTF-8 line is a Rejected, not the end
    of the file (drafting.userfiles' caps still bound the whole read)."""
    with open_user_file(path, Cap.DATASET, "prompt set") as handle:
        number = 0
        while raw := handle.readline(Cap.LINE + 1):
            number += 1
            if len(raw) > Cap.LINE and not raw.endswith(b"\n"):
                while (rest := handle.readline(Cap.LINE)) and not rest.endswith(b"\n"):
                    pass
                yield number, Rejected(number, "line_too_long", f"over {Cap.LINE:,} bytes")
                continue
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                yield number, Rejected(number, "not_utf8", f"byte {exc.start}: {exc.reason}")
                continue
            if text.strip():
                yield number, text
