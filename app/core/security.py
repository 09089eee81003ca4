"""Bearer tokens with scopes. Tokens are random secrets; only their SHA-256 is stored."""

from __future__ import annotations

import hashlib
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
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
    """Counts failed authentications per client in a sliding minute (in-process, per API replica).

    Only failures count and only failures are refused: a request whose token is valid is served whatever
    its address did before (the caller checks the token first). Tokens carry 256 bits, so the limit is not
    what keeps them from being guessed; it keeps a guessing client to `per_minute` counted failures a minute
    and its noise out of the database and the logs.
    """

    WINDOW_S = 60.0
    _PRUNE_ABOVE = 10_000  # clients tracked before the idle ones are dropped

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock  # seconds, monotonic; a test passes one it moves by hand
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def blocked(self, client: str) -> bool:
        return self.retry_after(client) is not None

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until this client's next failure would be counted again, or None if not blocked."""
        if self.per_minute <= 0:
            return None
        with self._lock:
            window = self._window(client)
            if len(window) < self.per_minute:
                return None
            oldest = window[len(window) - self.per_minute]
            return max(1, math.ceil(oldest + self.WINDOW_S - self._clock()))

    def record_failure(self, client: str) -> None:
        with self._lock:
            window = self._window(client)
            window.append(self._clock())
            while len(window) > max(self.per_minute, 1):
                window.popleft()
            if len(self._failures) > self._PRUNE_ABOVE:
                self._prune()

    def _window(self, client: str) -> deque[float]:
        window = self._failures.setdefault(client, deque())
        cutoff = self._clock() - self.WINDOW_S
        while window and window[0] < cutoff:
            window.popleft()
        return window

    def _prune(self) -> None:
        cutoff = self._clock() - self.WINDOW_S
        self._failures = {k: w for k, w in self._failures.items() if w and w[-1] >= cutoff}


class PrincipalCache:
    """Principals of recently authenticated tokens by token hash, kept ttl_s seconds (in-process, per API
    replica), so a status poll does not read its token row on every request. ttl_s 0 disables it.

    The trade-off: a token revoked through another API process keeps working here for up to ttl_s. The
    process that revokes calls clear() once the revocation commits; a lookup that read the row before then
    is not stored (the generation moved on), so revocation there is immediate.
    """

    _PRUNE_ABOVE = 1024

    def __init__(self, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock  # seconds, monotonic; a test passes one it moves by hand
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._generation = 0
        self._lock = threading.Lock()

    def resolve(self, token_hash: str, load: Callable[[], Principal | None]) -> Principal | None:
        """The cached principal, or load()'s (stored when it is one; refusals are never cached)."""
        if self.ttl_s <= 0:
            return load()
        now = self._clock()
        with self._lock:
            entry = self._entries.get(token_hash)
            if entry is not None and entry[0] > now:
                return entry[1]
            generation = self._generation
        principal = load()
        if principal is not None:
            with self._lock:
                if generation == self._generation:
                    self._prune(now)
                    self._entries[token_hash] = (now + self.ttl_s, principal)
        return principal

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._generation += 1

    def _prune(self, now: float) -> None:
        if len(self._entries) > self._PRUNE_ABOVE:
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
