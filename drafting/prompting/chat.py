"""Render messages with the target's chat template, the one way eval, benchmark and generate all do it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drafting.prompting.records import Message, PromptRecord, RecordError


def has_chat_template(tokenizer: Any) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def render_messages(tokenizer: Any, messages: Sequence[Message], *, generation_prompt: bool = True) -> str:
    """The template's text for `messages` (with the assistant generation prompt appended by default)."""
    if not has_chat_template(tokenizer):
        raise RecordError("no_chat_template", "the target's tokenizer has no chat template")
    try:
        text = tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception as exc:  # noqa: BLE001 - jinja raises whatever the template author chose
        raise RecordError("chat_template_error", str(exc)[:200]) from None
    if not isinstance(text, str):
        raise RecordError("chat_template_error", f"template returned {type(text).__name__}")
    return text


def prompt_text(tokenizer: Any, record: PromptRecord, *, turn: int = 0) -> str:
    """What is sent for `record`: raw text for a `text` record, else its messages up to user turn `turn`
    (0-based) rendered with the chat template. Later turns need the earlier answers: see `generate`."""
    if record.format == "text":
        assert record.raw_text is not None
        return record.raw_text
    return render_messages(tokenizer, messages_through_user_turn(record.messages, turn))


def messages_through_user_turn(messages: Sequence[Message], turn: int) -> list[Message]:
    """The messages up to and including the `turn`-th user message (system and earlier turns kept)."""
    seen = -1
    for index, message in enumerate(messages):
        if message["role"] == "user":
            seen += 1
            if seen == turn:
                return list(messages[: index + 1])
    raise RecordError("malformed_record", f"no user turn {turn}")
