"""The OpenAPI document tells the truth about errors (every one is application/problem+json) and about
authentication: a bearer token on every operation but the health probes."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.core.errors import PROBLEM_JSON

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "code", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "code": {"type": "string", "description": "stable, machine-readable"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
    "additionalProperties": True,
}
_ERRORS = {
    "400": "malformed request",
    "401": "no valid bearer token",
    "403": "the token lacks the scope",
    "404": "not found",
    "409": "conflicts with the current state",
    "413": "request body too large",
    "422": "invalid request",
    "429": "too many failed authentications",
    "500": "internal error",
    "503": "database unavailable",
}
_PUBLIC = ("/healthz", "/readyz")
BEARER = {
    "type": "http",
    "scheme": "bearer",
    "description": "an eyas token (eyas up prints one; POST /v1/tokens makes more); "
    "scopes read < submit < admin",
}


def install_openapi(app: FastAPI) -> None:
    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
        components["securitySchemes"] = {"bearer": BEARER}
        schema["security"] = [{"bearer": []}]
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                _document_errors(path, operation)
                if path in _PUBLIC:
                    operation["security"] = []
        app.openapi_schema = schema
        return schema

    app.openapi = build  # type: ignore[method-assign]


def _document_errors(path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    for status, description in _ERRORS.items():
        if path in _PUBLIC and status not in ("500", "503"):
            continue
        responses[status] = {
            "description": description,
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
