"""Prompt sets for benchmarks and offline evaluation (JSONL: one {"text"} or {"input_ids"} object a line)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafting.userfiles import Cap, iter_user_lines

DEFAULT_PROMPTS = Path(__file__).with_name("default.jsonl")
MAX_PROMPT_FILE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    input_ids: list[int] | None = None
    max_new_tokens: int | None = None

    def ids_or_bytes(self, vocab_size: int | None = None) -> list[int]:
        """Token ids: the given ones, else the text's UTF-8 bytes (for targets without a tokenizer)."""
        if self.input_ids is not None:
            return list(self.input_ids)
        assert self.text is not None
        raw = list(self.text.encode("utf-8"))
        return [b % vocab_size for b in raw] if vocab_size else raw


def load_prompts(path: str | Path | None = None, *, limit: int | None = None) -> list[Prompt]:
    """Read a JSONL prompt set (the built-in one when path is None); raises ValueError naming the bad line."""
    source = Path(path) if path is not None else DEFAULT_PROMPTS
    prompts: list[Prompt] = []
    for number, line in iter_user_lines(source, MAX_PROMPT_FILE_BYTES, "prompt file", Cap.LINE):
        if not line.strip():
            continue
        try:
            prompts.append(_parse(json.loads(line)))
        except ValueError as exc:
            raise ValueError(f"{source}:{number}: {exc}") from exc
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise ValueError(f"{source} holds no prompts")
    return prompts


def _parse(row: Any) -> Prompt:
    if not isinstance(row, dict):
        raise ValueError("each line must be a JSON object")
    text, ids, max_new = row.get("text"), row.get("input_ids"), row.get("max_new_tokens")
    if ids is not None and not (isinstance(ids, list) and ids and all(_is_token(t) for t in ids)):
        raise ValueError("input_ids must be a non-empty list of non-negative integers")
    if ids is None and not (isinstance(text, str) and text):
        raise ValueError('a prompt needs "text" (a non-empty string) or "input_ids"')
    if max_new is not None and not (isinstance(max_new, int) and max_new > 0):
        raise ValueError("max_new_tokens must be a positive integer")
    return Prompt(text=text if ids is None else None, input_ids=ids, max_new_tokens=max_new)


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
