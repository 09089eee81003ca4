"""Input no route may see, refused at the edge with one 422 for every route: the request path and query
string must be UTF-8 without NUL, and a JSON body must keep within app.core.bounded_json's bounds (depth,
keys, items, no key twice) and hold no lone surrogate ("\\ud800") and no non-finite number (NaN, Infinity,
or a literal such as 1e400 that overflows a double).

Routes and models then never meet a string that cannot be stored or serialised back, nor a number that
pydantic would store as null. Called by the body-size middleware (app.core.limits), which has the body.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi.responses import JSONResponse
from starlette.types import Scope

from app.core import bounded_json
from app.core.bounded_json import JsonRefused
from app.core.errors import ErrorCode, problem
from contract.params.text import first_refused


def refusal(scope: Scope, body: bytes | None) -> JSONResponse | None:
    """The 422 problem for this request's path, query string and JSON body, or None when they are fine."""
    found = _url_problem(scope) or (_body_problem(scope, body) if body else None)
    if found is None:
        return None
    field, message, kind = found
    return problem(
        ErrorCode.VALIDATION_FAILED,
        f"{field}: {message}",
        instance=_safe_path(scope),
        errors=[{"field": field, "message": message, "type": kind}],
    )


def _url_problem(scope: Scope) -> tuple[str, str, str] | None:
    raw_path = scope.get("raw_path") or str(scope.get("path", "")).encode("utf-8", "surrogateescape")
    why = _text_problem(unquote_to_bytes(raw_path.split(b"?", 1)[0]))
    if why is not None:
        return "path", why, "url_text"
    for part in bytes(scope.get("query_string", b"")).split(b"&"):
        name, _, value = part.partition(b"=")
        name_text = unquote_to_bytes(name.replace(b"+", b" "))
        why = _text_problem(name_text) or _text_problem(unquote_to_bytes(value.replace(b"+", b" ")))
        if why is not None:
            label = name_text.decode("utf-8", "replace").replace("\x00", "\\x00")
            return f"query.{label}", why, "url_text"
    return None


def _text_problem(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not valid UTF-8 (an encoded surrogate or a stray byte)"
    if "\x00" in text:
        return "contains a NUL character"
    return None


def _body_problem(scope: Scope, body: bytes) -> tuple[str, str, str] | None:
    if not _is_json(scope):
        return None
    try:
        document: Any = bounded_json.loads(body)
    except JsonRefused as refused:
        return refused.field("body"), refused.message, refused.kind
    except ValueError:
        return None  # malformed JSON (or not UTF-8): the route's own parsing answers it with a 422
    found = first_refused(document)
    if found is None:
        return None
    where, message = found
    kind = "finite_number" if "finite" in message else "string_unicode"
    return ".".join(["body", *where]), message, kind


def _is_json(scope: Scope) -> bool:
    """FastAPI parses a body as JSON when it has no content type or a JSON one; so do these checks."""
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for name, value in headers:
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower().decode("latin-1")
            maintype, _, subtype = media.partition("/")
            return maintype == "application" and (subtype == "json" or subtype.endswith("+json"))
    return True


def _safe_path(scope: Scope) -> str:
    return str(scope.get("path", "")).encode("utf-8", "replace").decode("utf-8")
