"""Prompt sets for benchmarks and offline evaluation.

A set is a JSONL file or a named set (drafting.prompting.named: `default`, `mtbench`). A line is any record
drafting.prompting reads (plain `text`, OpenAI `messages`, ShareGPT `conversations`, MT-Bench `turns`) or
`{"input_ids": [...]}` (token ids sent as they are). A `text` record is sent raw; a chat record is rendered
with the target's chat template (`render_chat`, the one rendering eval, benchmark and generate share) and
sent as the rendered text's token ids.

Which turns a chat record asks: everything through its last user turn whose earlier user turns all have an
answer in the record. MT-Bench records hold two user turns and no answers, so only the first turn is asked
(the second needs the first's answer, which `generate` makes and eval/benchmark do not); a record that gives
the assistant turns is asked its last user turn in context. `dropped_turns` counts what was left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from drafting.prompting.chat import evaluation_messages, render_ids
from drafting.prompting.named import NAMED_SETS, describe, resolve_source
from drafting.prompting.records import Message, RecordError, parse_record
from drafting.prompting.split import category_rotation
from drafting.userfiles import Cap, iter_user_lines

DEFAULT_PROMPTS = resolve_source(None)
MAX_PROMPT_FILE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    input_ids: list[int] | None = None
    max_new_tokens: int | None = None
    # A chat prompt: the messages to render with the target's chat template (`render_chat` fills text and
    # input_ids from them); None for a raw text or ids prompt.
    messages: tuple[Message, ...] | None = None
    category: str | None = None
    id: str | None = None
    dropped_turns: int = 0

    @property
    def needs_rendering(self) -> bool:
        return self.messages is not None and self.input_ids is None

    def ids_or_bytes(self, vocab_size: int | None = None) -> list[int]:
        """Token ids: the given ones, else the text's UTF-8 bytes (for targets without a tokenizer)."""
        if self.input_ids is not None:
            return list(self.input_ids)
        if self.text is None:
            raise ValueError("a chat prompt must be rendered with the target's chat template first")
        raw = list(self.text.encode("utf-8"))
        return [b % vocab_size for b in raw] if vocab_size else raw


def load_prompts(path: str | Path | None = None, *, limit: int | None = None) -> list[Prompt]:
    """Read a prompt set (the built-in one when path is None, a named set by its name); raises ValueError
    naming the bad line (UserFileError for a file eyas will not read, PromptSetUnavailable for a named set
    whose package is not installed).

    With a limit, a set whose records carry categories is taken round-robin over its categories (file order
    within each), so `max_prompts: 16` of MT-Bench asks two questions of each of its 8 categories rather than
    16 writing prompts; a set without categories gives its first `limit` prompts."""
    source = resolve_source(path)
    prompts: list[Prompt] = []
    for number, line in iter_user_lines(source, MAX_PROMPT_FILE_BYTES, "prompt file", Cap.LINE):
        if not line.strip():
            continue
        try:
            prompts.append(_parse(json.loads(line)))
        except (ValueError, RecordError) as exc:
            raise ValueError(f"{source}:{number}: {exc}") from exc
        if limit is not None and len(prompts) >= limit and prompts[0].category is None:
            break
    if not prompts:
        raise ValueError(f"{source} holds no prompts")
    return _balanced(prompts, limit) if limit is not None else prompts


def _balanced(prompts: list[Prompt], limit: int) -> list[Prompt]:
    """The first `limit` prompts taken one category at a time, in turn (categories in order of appearance)."""
    if len(prompts) <= limit or not any(p.category for p in prompts):
        return prompts[:limit]
    return category_rotation(prompts, lambda prompt: prompt.category)[:limit]


def render_chat(prompts: Sequence[Prompt], tokenizer: Any) -> list[Prompt]:
    """Chat prompts rendered with `tokenizer`'s chat template (text and ids); other prompts as they are.
    Raises RecordError (a ValueError) when a chat prompt meets a tokenizer without a chat template."""
    rendered = []
    for prompt in prompts:
        if not prompt.needs_rendering:
            rendered.append(prompt)
            continue
        assert prompt.messages is not None
        text, ids = render_ids(tokenizer, prompt.messages)
        rendered.append(replace(prompt, text=text, input_ids=ids))
    return rendered


def has_chat(prompts: Sequence[Prompt]) -> bool:
    return any(p.needs_rendering for p in prompts)


def set_summary(
    source: str | Path | None, prompts: Sequence[Prompt], raw_text_note: str | None = None
) -> dict[str, Any]:
    """What a result says about its prompts: the set, how many, chat or raw, which turns were asked, and
    `raw_text_note` (chat_source.raw_text_note) when raw text went to a chat target."""
    chat = [p for p in prompts if p.messages is not None]
    summary: dict[str, Any] = {
        "set": describe(source),
        "prompts": len(prompts),
        "chat_prompts": len(chat),
        "categories": sorted({p.category for p in prompts if p.category}),
    }
    dropped = sum(p.dropped_turns for p in chat)
    if chat:
        summary["turns"] = (
            f"chat records are asked through their last user turn whose earlier turns are answered in the "
            f"record; {dropped} later user turn(s) were left out (they need answers the set does not give)"
            if dropped
            else "chat records are asked through their last user turn"
        )
    if isinstance(source, str) and source in NAMED_SETS:
        summary["provider"] = NAMED_SETS[source].provider
    if raw_text_note is not None:
        summary["raw_text_note"] = raw_text_note
    return summary


def _parse(row: Any) -> Prompt:
    if isinstance(row, dict) and "input_ids" in row:
        return _parse_ids(row)
    record = parse_record(row)
    common: dict[str, Any] = {
        "max_new_tokens": record.max_new_tokens,
        "category": record.category,
        "id": record.id,
    }
    if record.format == "text":
        return Prompt(text=record.raw_text, **common)
    messages, dropped = evaluation_messages(record.messages)
    return Prompt(messages=tuple(messages), dropped_turns=dropped, **common)


def _parse_ids(row: dict[str, Any]) -> Prompt:
    ids, max_new = row.get("input_ids"), row.get("max_new_tokens")
    if not (isinstance(ids, list) and ids and all(_is_token(t) for t in ids)):
        raise ValueError("input_ids must be a non-empty list of non-negative integers")
    if max_new is not None and not (_is_token(max_new) and max_new > 0):
        raise ValueError("max_new_tokens must be a positive integer")
    category = row.get("category") if isinstance(row.get("category"), str) else None
    return Prompt(input_ids=ids, max_new_tokens=max_new, category=category)


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def prepare_prompts(
    source: str | Path | None, *, limit: int | None = None, tokenizer_folder: str | Path | None = None
) -> list[Prompt]:
    """`load_prompts`, then chat prompts rendered with the chat template of the tokenizer in
    `tokenizer_folder` (ValueError when the set has chat records and no tokenizer with a template is
    given)."""
    prompts = load_prompts(source, limit=limit)
    if not has_chat(prompts):
        return prompts
    if tokenizer_folder is None:
        raise ValueError(
            f"{describe(source)} holds chat records, rendered with the target's chat template, and no target "
            "tokenizer is known here"
        )
    from drafting.serving.prompts.chat_source import load_tokenizer

    return render_chat(prompts, load_tokenizer(tokenizer_folder))
