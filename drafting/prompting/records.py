"""Parse one JSONL line of a prompt or conversation set into a `PromptRecord` (see the package doc)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

ROLE_ALIASES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "model": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
}

Message = dict[str, str]  # {"role": ..., "content": ...}, role normalised to ROLE_ALIASES' values


class RecordError(ValueError):
    """A record eyas cannot use; `reason` is a stable short code, the message says what is wrong."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class PromptRecord:
    """A prompt or conversation. `format` says which shape it came in; `messages` is always filled:
    a `text` record is one user message (and `raw_text` keeps the text for raw completion)."""

    format: Literal["messages", "conversations", "turns", "text"]
    messages: tuple[Message, ...]
    id: str | None = None
    category: str | None = None
    raw_text: str | None = None
    max_new_tokens: int | None = None

    @property
    def user_turns(self) -> list[str]:
        return [m["content"] for m in self.messages if m["role"] == "user"]

    @property
    def system(self) -> str | None:
        first = self.messages[0] if self.messages else None
        return first["content"] if first is not None and first["role"] == "system" else None


def parse_line(line: str) -> PromptRecord:
    """One JSONL line → a record; raises RecordError (reason `malformed_record`, `unknown_role`, …)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordError("malformed_record", f"not JSON ({exc.msg})") from None
    return parse_record(row)


def parse_record(row: Any) -> PromptRecord:
    if not isinstance(row, dict):
        raise RecordError("malformed_record", "each line must be a JSON object")
    ident = _ident(row.get("id", row.get("question_id")))
    category = row.get("category") if isinstance(row.get("category"), str) else None
    max_new = row.get("max_new_tokens")
    if max_new is not None and not (_is_count(max_new) and max_new > 0):
        raise RecordError("malformed_record", "max_new_tokens must be a positive integer")
    common: dict[str, Any] = {"id": ident, "category": category, "max_new_tokens": max_new}
    for key in ("messages", "conversations"):
        if key in row:
            turns = row[key]
            if not isinstance(turns, list) or not turns:
                raise RecordError("malformed_record", f"`{key}` must be a non-empty list")
            messages = tuple(normalise_turn(t) for t in turns)
            return PromptRecord(key, messages, **common)
    if "turns" in row:
        turns = row["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
            raise RecordError("malformed_record", "`turns` must be a non-empty list of non-empty strings")
        return PromptRecord("turns", tuple({"role": "user", "content": t} for t in turns), **common)
    text = row.get("text")
    if isinstance(text, str) and text:
        return PromptRecord("text", ({"role": "user", "content": text},), raw_text=text, **common)
    raise RecordError(
        "malformed_record",
        'a record needs "messages", "conversations", "turns" or "text" (a non-empty string)',
    )


def normalise_turn(turn: Any) -> Message:
    if not isinstance(turn, dict):
        raise RecordError("malformed_record", "a turn is not an object")
    raw_role = str(turn.get("role", turn.get("from", ""))).lower()
    role = ROLE_ALIASES.get(raw_role)
    if role is None:
        raise RecordError("unknown_role", f"role {raw_role[:40]!r}")
    content = turn.get("content", turn.get("value"))
    if not isinstance(content, str):
        raise RecordError("non_text_content", f"{role} content is {type(content).__name__}, not text")
    return {"role": role, "content": content}


def _ident(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | str):
        return str(value)[:200]
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
