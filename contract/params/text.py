"""Text and numbers that JSON can carry but eyas refuses: lone surrogates, non-finite numbers, and (in paths)
bidirectional-text controls. Pure standard library, shared by the API's edge checks and the params models.

A lone surrogate ("\\ud800" in JSON) is not a Unicode character: it cannot be encoded as UTF-8, so a value
holding one cannot be stored as text, logged, or serialised back to a client. A non-finite number (NaN,
Infinity, or a literal like 1e400 that overflows a double) means nothing as a learning rate or a timeout.
"""

from __future__ import annotations

import math
import re
from typing import Any

REPLACEMENT = "\ufffd"
# Characters that reorder how the text around them is displayed (a path can show as another path).
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
BIDI_CONTROL_RE = re.compile(f"[{BIDI_CONTROLS}]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
# A JSON text escapes a surrogate as \uD8xx-\uDFxx; without one, nothing decoded from it can hold one.
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")

NON_FINITE = "non-finite number"
LONE_SURROGATE = "lone surrogate (not valid Unicode text)"


def has_lone_surrogate(text: str) -> bool:
    return _SURROGATE_RE.search(text) is not None


def scrub_text(text: str) -> str:
    """The text with every lone surrogate replaced by U+FFFD (a valid pair is joined into its character)."""
    if not has_lone_surrogate(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def scrub(value: Any) -> Any:
    """A JSON-like value with lone surrogates replaced in every string, dict keys included."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def may_hold_surrogates(json_text: str | bytes) -> bool:
    """Whether decoding this JSON text can produce a lone surrogate (it has a surrogate escape)."""
    text = json_text.decode("utf-8", "replace") if isinstance(json_text, bytes) else json_text
    return _SURROGATE_ESCAPE_RE.search(text) is not None


def first_refused(value: Any) -> tuple[list[str], str] | None:
    """(location, why) of the first lone surrogate or non-finite number in a JSON-like value, or None.

    Walks without recursion, so a deeply nested document cannot exhaust the stack here."""
    pending: list[tuple[list[str], Any]] = [([], value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                return where, LONE_SURROGATE
        elif isinstance(item, float):
            if not math.isfinite(item):
                return where, NON_FINITE
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                name = str(key)
                if has_lone_surrogate(name):
                    return [*where, scrub_text(name)], LONE_SURROGATE
                children.append(([*where, name], child))
            pending.extend(reversed(children))
        elif isinstance(item, list | tuple):
            pending.extend(reversed([([*where, str(i)], child) for i, child in enumerate(item)]))
    return None
