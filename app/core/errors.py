"""Typed errors rendered as application/problem+json with a stable `code`."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from contract.params.text import LONE_SURROGATE, NON_FINITE, scrub

logger = logging.getLogger("eyas.api")
PROBLEM_JSON = "application/problem+json"


class ErrorCode(Enum):
    """(code, HTTP status). Codes are part of the API: never rename one."""

    UNAUTHENTICATED = ("UNAUTHENTICATED", 401)
    FORBIDDEN = ("FORBIDDEN", 403)
    NOT_FOUND = ("NOT_FOUND", 404)
    BAD_REQUEST = ("BAD_REQUEST", 400)
    VALIDATION_FAILED = ("VALIDATION_FAILED", 422)
    UNKNOWN_KIND = ("UNKNOWN_KIND", 422)
    INVALID_PARAMS = ("INVALID_PARAMS", 422)
    PATH_NOT_ALLOWED = ("PATH_NOT_ALLOWED", 422)
    INVALID_TRANSITION = ("INVALID_TRANSITION", 409)
    IDEMPOTENCY_MISMATCH = ("IDEMPOTENCY_MISMATCH", 422)
    IDEMPOTENCY_IN_FLIGHT = ("IDEMPOTENCY_IN_FLIGHT", 409)
    NO_HOST_CAN_SATISFY = ("NO_HOST_CAN_SATISFY", 409)
    UNKNOWN_HOST = ("UNKNOWN_HOST", 422)
    UNKNOWN_DEPENDENCY = ("UNKNOWN_DEPENDENCY", 422)
    NOT_COMPARABLE = ("NOT_COMPARABLE", 409)
    BODY_TOO_LARGE = ("BODY_TOO_LARGE", 413)
    RATE_LIMITED = ("RATE_LIMITED", 429)
    DATABASE_UNAVAILABLE = ("DATABASE_UNAVAILABLE", 503)
    NOT_READY = ("NOT_READY", 503)
    INTERNAL = ("INTERNAL", 500)

    @property
    def code(self) -> str:
        return self.value[0]

    @property
    def status(self) -> int:
        return self.value[1]


# Seconds a 429 tells the client to wait when its cause does not say.
DEFAULT_RETRY_AFTER_S = 60


class AppError(Exception):
    def __init__(
        self, code: ErrorCode, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.headers = headers
        self.extra = extra


T = TypeVar("T")


def found_or_404(row: T | None, detail: str) -> T:
    """The row a repository found, or a 404 NOT_FOUND problem saying what was missing."""
    if row is None:
        raise AppError(ErrorCode.NOT_FOUND, detail)
    return row


def problem(
    code: ErrorCode,
    detail: str,
    *,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """The problem+json response. Every string is made serialisable (a lone surrogate becomes U+FFFD), so
    an error about hostile input can always be sent; a 429 always says when to retry."""
    body: dict[str, Any] = {
        "type": f"https://eyas.dev/problems/{code.code.lower().replace('_', '-')}",
        "title": code.code.replace("_", " ").capitalize(),
        "status": code.status,
        "code": code.code,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    body.update(extra)
    headers = dict(headers or {})
    if code is ErrorCode.UNAUTHENTICATED:
        headers["WWW-Authenticate"] = "Bearer"
    if code.status == 429:
        headers.setdefault("Retry-After", str(DEFAULT_RETRY_AFTER_S))
    return JSONResponse(
        scrub(body), status_code=code.status, media_type=PROBLEM_JSON, headers=headers or None
    )


# Pydantic's words for input refused by type, where eyas names the problem the same way everywhere.
_MESSAGES = {"finite_number": NON_FINITE, "string_unicode": LONE_SURROGATE}


_BOUNDS = frozenset({"less_than", "less_than_equal", "greater_than", "greater_than_equal", "multiple_of"})


def error_message(err: Any) -> str:
    """The message of one pydantic error, with eyas's wording for non-finite numbers and bad text: a NaN
    or Infinity (a query parameter's "nan" too) is a non-finite number, not a number out of bounds."""
    message = str(err.get("msg", "invalid"))
    if message.startswith("Input should be") and err.get("type") in _MESSAGES:
        return _MESSAGES[str(err.get("type"))]
    if err.get("type") in _BOUNDS and _non_finite(err.get("input")):
        return NON_FINITE
    return message


def _non_finite(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return False
    return isinstance(value, float) and not math.isfinite(value)


def field_errors(errors: Iterable[Any], prefix: Sequence[str] = ()) -> list[dict[str, Any]]:
    """pydantic's errors (a ValidationError's or a request's) as problem+json `errors` entries, each field
    dotted and under `prefix`."""
    return [
        {
            "field": ".".join([*prefix, *(str(part) for part in err.get("loc", ()))]),
            "message": error_message(err),
            "type": err.get("type"),
        }
        for err in errors
    ]


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    return field_errors(exc.errors())


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def _app_error(request: Request, exc: AppError) -> JSONResponse:
        return problem(exc.code, exc.detail, instance=request.url.path, headers=exc.headers, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _validation_errors(exc)
        first = errors[0] if errors else {"field": "", "message": "invalid request"}
        detail = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
        return problem(ErrorCode.VALIDATION_FAILED, detail, instance=request.url.path, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {
            400: ErrorCode.BAD_REQUEST,
            404: ErrorCode.NOT_FOUND,
            401: ErrorCode.UNAUTHENTICATED,
            403: ErrorCode.FORBIDDEN,
            429: ErrorCode.RATE_LIMITED,
        }.get(exc.status_code)
        headers = dict(exc.headers or {})
        if code is None:
            body = {"status": exc.status_code, "code": f"HTTP_{exc.status_code}", "detail": str(exc.detail)}
            return JSONResponse(
                scrub(body), status_code=exc.status_code, media_type=PROBLEM_JSON, headers=headers or None
            )
        return problem(code, str(exc.detail), instance=request.url.path, headers=headers)

    @app.exception_handler(DataError)
    async def _bad_value(request: Request, exc: DataError) -> JSONResponse:  # noqa: ARG001 - Starlette's handler signature
        return problem(
            ErrorCode.VALIDATION_FAILED,
            "a value in the request cannot be stored or compared by the database",
            instance=request.url.path,
        )

    @app.exception_handler(OperationalError)
    @app.exception_handler(DBAPIError)
    async def _db_down(request: Request, exc: Exception) -> JSONResponse:  # noqa: ARG001 - Starlette's handler signature
        logger.warning("database unavailable: %s", exc.__class__.__name__)
        return problem(ErrorCode.DATABASE_UNAVAILABLE, "the database is unavailable; retry shortly")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:  # noqa: ARG001 - Starlette's handler signature
        logger.exception("unhandled error on %s", request.url.path)
        return problem(ErrorCode.INTERNAL, "internal error", instance=request.url.path)
