"""JSON from a client, parsed with bounds on its structure: nesting depth, keys per object, items per array,
and no key given twice in one object.

Every body eyas takes is a small document a few levels deep (a pipeline spec is the deepest, about six).
Past these limits a document is refused with a 422 naming the limit and where it was passed, before any
route, model or hash sees it: pydantic's serializer stops at a fixed depth (a 500 while hashing the request
once came from a body 300 levels deep), and Python's JSON parser keeps the last of two equal keys, so
`{"scopes": ["read"], "scopes": ["admin"]}` would read as an admin token's request.
"""

from __future__ import annotations

import json
from typing import Any

from app.core.errors import AppError, ErrorCode

MAX_DEPTH = 32
MAX_KEYS = 1_000
MAX_ITEMS = 10_000


class JsonRefused(ValueError):
    """A document past a bound: where (keys and indices from the root), why, and the error type."""

    def __init__(self, where: list[str], message: str, kind: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message
        self.kind = kind

    def field(self, *prefix: str) -> str:
        return ".".join([*prefix, *self.where])

    def as_error(self, *prefix: str) -> AppError:
        """The 422 problem naming the field under `prefix` (e.g. "query", "spec")."""
        field = self.field(*prefix)
        return AppError(
            ErrorCode.VALIDATION_FAILED,
            f"{field}: {self.message}",
            errors=[{"field": field, "message": self.message, "type": self.kind}],
        )


class _Duplicated(dict[str, Any]):
    """An object in which `key` was given more than once (the walk reports it with its location)."""

    key: str


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) == len(pairs):
        return document
    marked = _Duplicated(document)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.key = key
            break
        seen.add(key)
    return marked


def loads(text: str | bytes) -> Any:
    """The document, or JsonRefused past a bound; malformed text raises json.JSONDecodeError as json.loads
    does."""
    try:
        document = json.loads(text, object_pairs_hook=_pairs)
    except RecursionError:
        raise JsonRefused([], _too_deep(), "json_depth") from None
    _check_structure(document)
    return document


def _too_deep() -> str:
    return f"nested deeper than {MAX_DEPTH} levels (the limit for a JSON document)"


def _check_structure(document: Any) -> None:
    """Depth, object size, array length and duplicate keys, walked without recursion."""
    pending: list[tuple[list[str], Any, int]] = [([], document, 1)]
    while pending:
        where, item, depth = pending.pop()
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise JsonRefused(where, _too_deep(), "json_depth")
        if isinstance(item, _Duplicated):
            raise JsonRefused(
                [*where, item.key], "this key is given twice in one object", "json_duplicate_key"
            )
        if isinstance(item, dict):
            if len(item) > MAX_KEYS:
                raise JsonRefused(where, f"an object with more than {MAX_KEYS} keys (the limit)", "json_keys")
            pending.extend(([*where, str(k)], v, depth + 1) for k, v in item.items())
        else:
            if len(item) > MAX_ITEMS:
                raise JsonRefused(
                    where, f"an array with more than {MAX_ITEMS} items (the limit)", "json_items"
                )
            pending.extend(([*where, str(i)], v, depth + 1) for i, v in enumerate(item))
