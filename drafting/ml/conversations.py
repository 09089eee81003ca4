"""Conversations -> token ids and a loss mask on assistant tokens, through the target's chat template.

The assistant spans come from rendering boundaries, not from template-specific regexes: for assistant turn i,
the text the template adds between "messages[:i] + generation prompt" and "messages[:i+1]" is that turn's
span (its content plus the template's end-of-turn marker, which the drafter must learn to predict too).
Tokens whose characters overlap a span get mask 1. This works for any template whose renderings of a
conversation's prefixes are prefixes of each other; templates that rewrite earlier turns (Qwen3 drops old
`<think>` blocks, for example) fail that check and the sample is dropped with a reason rather than mis-masked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from drafting.prompting.records import RecordError, parse_line
from drafting.userfiles import Cap, iter_user_lines

Overlong = Literal["truncate", "drop"]

MIN_TOKENS = 3  # fewer leaves no (input, next-token) pair for the drafter to learn from


class DropReason(StrEnum):
    MALFORMED = "malformed_record"
    UNKNOWN_ROLE = "unknown_role"
    NON_TEXT = "non_text_content"
    NO_ASSISTANT = "no_assistant_turn"
    TEMPLATE_ERROR = "chat_template_error"
    TEMPLATE_UNSTABLE = "template_not_prefix_stable"
    TOO_LONG = "longer_than_max_len"
    NO_LOSS_TOKENS = "no_assistant_tokens_within_max_len"
    TOO_SHORT = "too_short"


class SampleRejected(Exception):
    def __init__(self, reason: DropReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class TokenizedSample:
    input_ids: list[int]
    loss_mask: list[int]
    truncated: bool


@dataclass
class TokenizeSummary:
    """What happened to every record: kept, truncated, or dropped with a reason (and one example each)."""

    records: int = 0
    kept: int = 0
    truncated: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def reject(self, line_no: int, error: SampleRejected) -> None:
        self.dropped[error.reason.value] += 1
        self.examples.setdefault(error.reason.value, f"line {line_no}: {error.detail}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "kept": self.kept,
            "truncated": self.truncated,
            "tokens": self.tokens,
            "loss_tokens": self.loss_tokens,
            "dropped": dict(self.dropped),
            "drop_examples": self.examples,
        }


def parse_record(line: str) -> list[dict[str, str]]:
    """One JSONL line -> chat messages. Accepts OpenAI `messages` and ShareGPT `conversations`."""
    try:
        record = parse_line(line)
    except RecordError as error:
        raise SampleRejected(DropReason(error.reason), error.detail) from None
    if record.format not in ("messages", "conversations"):
        raise SampleRejected(DropReason.MALFORMED, "no non-empty `messages` or `conversations` list")
    return list(record.messages)


def _render(tokenizer: Any, messages: list[dict[str, str]], *, generation_prompt: bool) -> str:
    try:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception as exc:  # noqa: BLE001 - jinja raises whatever the template author chose
        raise SampleRejected(DropReason.TEMPLATE_ERROR, str(exc)[:200]) from None
    assert isinstance(text, str)
    return text


def assistant_spans(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant turns."""
    full = _render(tokenizer, messages, generation_prompt=False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], generation_prompt=True) if i else ""
        through = _render(tokenizer, messages[: i + 1], generation_prompt=False)
        if not (through.startswith(before) and full.startswith(through)):
            raise SampleRejected(DropReason.TEMPLATE_UNSTABLE, f"turn {i} re-renders earlier text")
        spans.append((len(before), len(through)))
    if not spans:
        raise SampleRejected(DropReason.NO_ASSISTANT, "no assistant turn")
    return full, spans


def tokenize_conversation(
    tokenizer: Any, messages: list[dict[str, str]], *, max_len: int, overlong: Overlong
) -> TokenizedSample:
    text, spans = assistant_spans(tokenizer, messages)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = list(encoding["input_ids"])
    mask = [
        int(any(start < end_span and end > start_span for start_span, end_span in spans))
        for start, end in encoding["offset_mapping"]
    ]
    truncated = len(ids) > max_len
    if truncated and overlong == "drop":
        raise SampleRejected(DropReason.TOO_LONG, f"{len(ids)} tokens > max_len {max_len}")
    ids, mask = ids[:max_len], mask[:max_len]
    if len(ids) < MIN_TOKENS:
        raise SampleRejected(DropReason.TOO_SHORT, f"{len(ids)} tokens")
    if not any(mask):
        raise SampleRejected(DropReason.NO_LOSS_TOKENS, f"all assistant tokens lie past max_len {max_len}")
    return TokenizedSample(ids, mask, truncated)


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a JSONL file: a regular file, each line at most Cap.LINE bytes."""
    for line_no, line in iter_user_lines(path, Cap.DATASET, "conversation data", Cap.LINE):
        if line.strip():
            yield line_no, line


def tokenize_file(
    path: Path, tokenizer: Any, *, max_len: int, overlong: Overlong, limit: int | None = None
) -> tuple[list[TokenizedSample], TokenizeSummary]:
    """Every usable conversation of a JSONL file (up to `limit` kept samples), in file order."""
    samples: list[TokenizedSample] = []
    summary = TokenizeSummary()
    for line_no, line in read_lines(path):
        if limit is not None and summary.kept >= limit:
            break
        summary.records += 1
        try:
            sample = tokenize_conversation(tokenizer, parse_record(line), max_len=max_len, overlong=overlong)
        except SampleRejected as error:
            summary.reject(line_no, error)
            continue
        samples.append(sample)
        summary.kept += 1
        summary.truncated += int(sample.truncated)
        summary.tokens += len(sample.input_ids)
        summary.loss_tokens += sum(sample.loss_mask)
    return samples, summary
