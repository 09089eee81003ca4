"""The principal cache: a poll does not read its token row on every request, yet revocation is immediate in
the revoking process, seen by other processes once EYAS_AUTH_CACHE_S has passed, and last_used_at is kept.
The cache reads the clock create_app is given; these tests move it by hand (ManualClock)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.config import Settings
from app.core.db import session_scope
from app.core.security import Principal, PrincipalCache, Scope
from app.main import create_app
from testsupport.timing import ManualClock

Headers = dict[str, str]


@contextmanager
def api(settings: Settings, cache_s: float, clock: ManualClock | None = None) -> Iterator[TestClient]:
    cached = settings.model_copy(update={"auth_cache_s": cache_s})
    with TestClient(create_app(cached, clock=clock or ManualClock())) as client:
        yield client


def new_reader(client: TestClient, admin: Headers) -> tuple[str, Headers]:
    created = client.post("/v1/tokens", json={"name": "poller", "scopes": ["read"]}, headers=admin).json()
    return created["id"], {"Authorization": f"Bearer {created['token']}"}


def revoke_in_database(settings: Settings, token_id: str) -> None:
    """What another API process's revocation leaves: the row revoked, this process not told."""
    with session_scope(settings) as session:
        session.execute(text("UPDATE api_token SET revoked_at = now() WHERE id = :id"), {"id": token_id})


def last_used(settings: Settings, token_id: str) -> datetime | None:
    with session_scope(settings) as session:
        stamp: datetime | None = session.execute(
            text("SELECT last_used_at FROM api_token WHERE id = :id"), {"id": token_id}
        ).scalar_one()
    return stamp


def test_revoking_is_immediate_in_the_revoking_process_however_long_the_cache(
    settings: Settings, admin: Headers
) -> None:
    with api(settings, cache_s=60) as client:
        token_id, reader = new_reader(client, admin)
        assert client.get("/v1/jobs", headers=reader).status_code == 200  # cached now
        assert client.post(f"/v1/tokens/{token_id}/revoke", headers=admin).status_code == 200
        assert client.get("/v1/jobs", headers=reader).status_code == 401


def test_a_revocation_elsewhere_is_seen_once_the_cache_period_ends(
    settings: Settings, admin: Headers
) -> None:
    clock = ManualClock()
    with api(settings, cache_s=30, clock=clock) as client:
        token_id, reader = new_reader(client, admin)
        assert client.get("/v1/jobs", headers=reader).status_code == 200
        revoke_in_database(settings, token_id)
        clock.advance(29.9)
        assert client.get("/v1/jobs", headers=reader).status_code == 200, "the cache was not used"
        clock.advance(0.2)
        assert client.get("/v1/jobs", headers=reader).status_code == 401


def test_a_disabled_cache_reads_the_token_on_every_request(settings: Settings, admin: Headers) -> None:
    with api(settings, cache_s=0) as client:
        token_id, reader = new_reader(client, admin)
        assert client.get("/v1/jobs", headers=reader).status_code == 200
        revoke_in_database(settings, token_id)
        assert client.get("/v1/jobs", headers=reader).status_code == 401


def test_last_used_at_is_still_written_at_most_once_a_minute(settings: Settings, admin: Headers) -> None:
    clock = ManualClock()
    with api(settings, cache_s=30, clock=clock) as client:
        token_id, reader = new_reader(client, admin)
        assert last_used(settings, token_id) is None
        assert client.get("/v1/jobs", headers=reader).status_code == 200
        first = last_used(settings, token_id)
        assert first is not None
        clock.advance(31)  # the cache period ends: the row is read again, but within the minute not written
        assert client.get("/v1/jobs", headers=reader).status_code == 200
        assert last_used(settings, token_id) == first
        with session_scope(settings) as session:
            session.execute(
                text("UPDATE api_token SET last_used_at = now() - interval '2 minutes' WHERE id = :id"),
                {"id": token_id},
            )
        clock.advance(31)
        assert client.get("/v1/jobs", headers=reader).status_code == 200
        refreshed = last_used(settings, token_id)
        assert refreshed is not None
        assert refreshed >= first, "a use over a minute after the last one was not recorded"


def test_a_lookup_that_read_before_a_revocation_committed_is_not_kept() -> None:
    """clear() during a load (a revocation committing meanwhile) leaves nothing cached from that load."""
    cache = PrincipalCache(ttl_s=60)
    principal = Principal(str(uuid.uuid4()), "poller", frozenset({Scope.READ}))
    loads: list[str] = []

    def load_while_revoked() -> Principal:
        loads.append("raced")
        cache.clear()
        return principal

    def load() -> Principal:
        loads.append("read")
        return principal

    assert cache.resolve("hash", load_while_revoked) is principal
    assert cache.resolve("hash", load) is principal
    assert cache.resolve("hash", load) is principal
    assert loads == ["raced", "read"]
