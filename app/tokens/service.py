"""API tokens: create (the secret is shown once), authenticate, list, revoke. Services never commit."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import event
from sqlalchemy.orm import Session

from app.core.errors import AppError, ErrorCode, found_or_404
from app.core.security import Principal, PrincipalCache, Scope, hash_token, new_token_secret
from app.models.base import utcnow
from app.models.token import ApiToken
from app.tokens import repository

_LAST_USED_RESOLUTION = timedelta(minutes=1)


def create_token(session: Session, *, name: str, scopes: list[Scope]) -> tuple[ApiToken, str]:
    if not scopes:
        raise AppError(ErrorCode.VALIDATION_FAILED, "a token needs at least one scope")
    secret = new_token_secret()
    token = ApiToken(
        id=uuid.uuid4(),
        name=name,
        prefix=secret[:9],
        token_hash=hash_token(secret),
        scopes=sorted({s.value for s in scopes}),
        created_at=utcnow(),
    )
    repository.add(session, token)
    session.flush()
    return token, secret


def authenticate(session: Session, secret: str, *, cache: PrincipalCache | None = None) -> Principal | None:
    """The token's principal, or None when it is unknown or revoked; with a cache, its row is read once per
    cache period rather than on every request."""
    token_hash = hash_token(secret)
    if cache is None:
        return _load_principal(session, token_hash)
    return cache.resolve(token_hash, lambda: _load_principal(session, token_hash))


def _load_principal(session: Session, token_hash: str) -> Principal | None:
    token = repository.by_hash(session, token_hash)
    if token is None or token.revoked_at is not None:
        return None
    now = utcnow()
    if token.last_used_at is None or now - token.last_used_at > _LAST_USED_RESOLUTION:
        token.last_used_at = now  # coarse, so status polling does not write on every request
    return Principal(str(token.id), token.name, frozenset(Scope(s) for s in token.scopes))


def list_tokens(session: Session) -> list[ApiToken]:
    return repository.all_tokens(session)


def revoke_token(session: Session, *, token_id: uuid.UUID, cache: PrincipalCache | None = None) -> ApiToken:
    """Revoke a token; this process's cache forgets every principal once the revocation commits."""
    token = found_or_404(repository.get(session, token_id), f"no token {token_id}")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    if cache is not None:
        # Cleared after the commit, not now: a request reading the row before the commit would cache it again.
        event.listen(session, "after_commit", lambda _session: cache.clear(), once=True)
    return token
