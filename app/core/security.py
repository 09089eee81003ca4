"""Bearer tokens with scopes. Tokens are random secrets; only their SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

TOKEN_PREFIX = "eyas_"


class Scope(StrEnum):
    READ = "read"
    SUBMIT = "submit"
    ADMIN = "admin"


# A scope grants itself and everything below it.
SCOPE_RANK = {Scope.READ: 0, Scope.SUBMIT: 1, Scope.ADMIN: 2}


@dataclass(frozen=True)
class Principal:
    token_id: str
    name: str
    scopes: frozenset[Scope]

    def allows(self, needed: Scope) -> bool:
        return any(SCOPE_RANK[s] >= SCOPE_RANK[needed] for s in self.scopes)


def new_token_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(secret: str) -> str:
    # Tokens carry 256 bits of entropy, so a fast hash is safe here (no dictionary to attack).
    return hashlib.sha256(secret.encode()).hexdigest()


class FailureLimiter:
    """Counts failed authentications per client in a sliding minute (in-process, per API replica)."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def blocked(self, client: str) -> bool:
        with self._lock:
            window = self._window(client)
            return len(window) >= self.per_minute

    def record_failure(self, client: str) -> None:
        with self._lock:
            self._window(client).append(time.monotonic())

    def _window(self, client: str) -> deque[float]:
        window = self._failures.setdefault(client, deque())
        cutoff = time.monotonic() - 60
        while window and window[0] < cutoff:
            window.popleft()
        return window
