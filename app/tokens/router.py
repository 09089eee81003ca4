"""/v1/tokens: admin-only token management."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, status

from app.core.deps import SessionDep
from app.tokens import service
from app.tokens.deps import AdminPrincipal
from app.tokens.schemas import TokenCreate, TokenCreated, TokenRead

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
def create_token(body: TokenCreate, session: SessionDep, _: AdminPrincipal) -> TokenCreated:
    """Create a token; its secret is in the response and never shown again."""
    token, secret = service.create_token(session, name=body.name, scopes=body.scopes)
    return TokenCreated(**TokenRead.model_validate(token).model_dump(), token=secret)


@router.get("", response_model=list[TokenRead])
def list_tokens(session: SessionDep, _: AdminPrincipal) -> list[TokenRead]:
    """List tokens (never their secrets)."""
    return [TokenRead.model_validate(t) for t in service.list_tokens(session)]


@router.post("/{token_id}/revoke", response_model=TokenRead)
def revoke_token(token_id: uuid.UUID, request: Request, session: SessionDep, _: AdminPrincipal) -> TokenRead:
    """Revoke a token: it stops working at once on this API process, within EYAS_AUTH_CACHE_S on others."""
    cache = request.app.state.principal_cache
    return TokenRead.model_validate(service.revoke_token(session, token_id=token_id, cache=cache))
