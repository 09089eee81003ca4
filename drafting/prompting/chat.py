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


def render_ids(tokenizer: Any, messages: Sequence[Message]) -> tuple[str, list[int]]:
    """The rendered text and its token ids. The template writes the special tokens itself (BOS, turn
    markers), so the text is tokenized without adding any: a tokenizer that adds a BOS would double it."""
    text = render_messages(tokenizer, messages)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise RecordError("chat_template_error", "the rendered prompt tokenizes to nothing")
    return text, [int(i) for i in ids]


def evaluation_messages(messages: Sequence[Message]) -> tuple[list[Message], int]:
    """What eval and benchmark ask of a chat record: the messages through its last user turn whose earlier
    user turns are all answered in the record, and how many later user turns were left out (each needs an
    answer the record does not give: MT-Bench's second turn). A trailing assistant turn is the answer the
    target is asked to give, so it is dropped."""
    end: int | None = None
    awaiting_answer = False
    for index, message in enumerate(messages):
        if message["role"] == "user":
            if awaiting_answer:
                break
            end, awaiting_answer = index, True
        elif message["role"] == "assistant":
            awaiting_answer = False
    if end is None:
        raise RecordError("malformed_record", "no user turn")
    dropped = sum(1 for m in messages[end + 1 :] if m["role"] == "user")
    return list(messages[: end + 1]), dropped
