"""/openapi.json: the OpenAPI document, for a token with the read scope (it maps every route eyas has).

No viewer is served: Swagger UI and ReDoc load their scripts from a public CDN, and a page a browser opens
cannot carry the bearer token. Any OpenAPI viewer reads the document fetched with a token."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.tokens.deps import ReadPrincipal

router = APIRouter(tags=["meta"])


@router.get("/openapi.json", include_in_schema=False)
def openapi_document(request: Request, _: ReadPrincipal) -> dict[str, Any]:
    """The OpenAPI document of this API."""
    document: dict[str, Any] = request.app.openapi()
    return document
