"""A job's params, validated by its stage's model (contract.stages): at submit, and again once its
references are filled (app/jobs/refs.py) — nowhere else in the app."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.core.errors import AppError, ErrorCode, field_errors
from contract.params.common import StageParams
from contract.stages import STAGES


def validate_params(kind: str, raw: dict[str, Any]) -> StageParams:
    if kind not in STAGES:
        raise AppError(
            ErrorCode.UNKNOWN_KIND,
            f"unknown job kind {kind!r}; known kinds: {', '.join(STAGES)}",
            errors=[{"field": "kind", "message": "unknown kind"}],
        )
    try:
        return STAGES[kind].parse(raw)
    except ValidationError as exc:
        errors = field_errors(exc.errors(), ["params"])
        first = errors[0]
        raise AppError(
            ErrorCode.INVALID_PARAMS, f"{first['field']}: {first['message']}", errors=errors
        ) from None
