"""Who is calling: the bearer token checked against the tokens domain, as a Principal with scopes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from app.core.deps import SessionDep
from app.core.errors import AppError, ErrorCode
from app.core.security import FailureLimiter, Principal, PrincipalCache, Scope
from app.tokens import service as tokens


def require(scope: Scope) -> Callable[..., Principal]:
    def _principal(request: Request, session: SessionDep) -> Principal:
        # The token is checked first: a valid one is served even from an address that is being throttled;
        # only failures are counted, and only failures wait.
        secret = _bearer(request)
        cache: PrincipalCache = request.app.state.principal_cache
        principal = tokens.authenticate(session, secret, cache=cache) if secret else None
        if principal is None:
            limiter: FailureLimiter = request.app.state.auth_limiter
            client = request.client.host if request.client else "?"
            wait = limiter.retry_after(client)
            if wait is not None:
                raise AppError(
                    ErrorCode.RATE_LIMITED,
                    f"too many failed authentications from this address; retry in {wait} s",
                    headers={"Retry-After": str(wait)},
                    retry_after_s=wait,
                )
            limiter.record_failure(client)
            detail = "missing bearer token" if secret is None else "invalid or revoked token"
            raise AppError(ErrorCode.UNAUTHENTICATED, detail)
        if not principal.allows(scope):
            raise AppError(ErrorCode.FORBIDDEN, f"this token lacks the '{scope.value}' scope")
        return principal

    _principal.required_scope = scope  # type: ignore[attr-defined]
    return _principal


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip() or len(value) > 512:
        return ""
    return value.strip()


ReadPrincipal = Annotated[Principal, Depends(require(Scope.READ))]
SubmitPrincipal = Annotated[Principal, Depends(require(Scope.SUBMIT))]
AdminPrincipal = Annotated[Principal, Depends(require(Scope.ADMIN))]
