"""Authentication and authorisation across the whole route table, token storage, revocation, rate limiting.

The route walk reads `create_app().routes`, so a route added without a scope dependency fails here.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from app.core.config import Settings
from app.core.db import session_scope
from app.core.security import FailureLimiter, Scope
from app.main import create_app
from app.models.job import Job
from tests.conftest import make_token
from testsupport.timing import ManualClock

Headers = dict[str, str]
# Routes that answer without a token, on purpose: health probes, and the dashboard's page shell and static
# files (they hold no data; their scripts call the API with a token). The OpenAPI document needs one.
PUBLIC = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/"),
    ("GET", "/dashboard/{name:path}"),
}
SMALLER_SCOPE = {Scope.SUBMIT: Scope.READ, Scope.ADMIN: Scope.SUBMIT}


def required_scope(route: Any) -> Scope | None:
    """The scope the route's dependencies demand (deps.require marks its checker), or None."""
    dependant = getattr(route, "dependant", None)
    pending = list(dependant.dependencies) if dependant is not None else []
    while pending:
        dependency = pending.pop()
        scope = getattr(dependency.call, "required_scope", None)
        if scope is not None:
            return Scope(scope)
        pending.extend(dependency.dependencies)
    return None


def every_route(app: FastAPI) -> list[tuple[str, str, Any]]:
    """(method, path template, route) for every HTTP route the app serves, included routers flattened."""
    found = []
    for route in iter_route_contexts(app.routes):
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                found.append((method, route.path, route))
    return found


def concrete(path: str) -> str:
    """A request path for a template: a fresh UUID for ids, a plain word for names."""
    return re.sub(
        r"\{(\w+)(:path)?\}", lambda m: str(uuid.uuid4()) if m.group(1).endswith("id") else "gpu-a", path
    )


def job_count(settings: Settings) -> int:
    with session_scope(settings) as session:
        return int(session.scalar(select(func.count()).select_from(Job)) or 0)


@pytest.fixture
def token_for(settings: Settings) -> Callable[[Scope], Headers]:
    return lambda scope: {"Authorization": f"Bearer {make_token(settings, scope, name=scope.value)}"}


def test_every_route_but_the_public_ones_needs_a_token_and_its_scope(
    settings: Settings, token_for: Callable[[Scope], Headers]
) -> None:
    app = create_app(settings.model_copy(update={"auth_failures_per_minute": 10_000}))
    routes = every_route(app)
    assert len(routes) > 20, "the route table looks empty"
    unguarded = [(m, p) for m, p, r in routes if (m, p) not in PUBLIC and required_scope(r) is None]
    assert unguarded == [], f"routes without a scope dependency: {unguarded}"
    jobs_before = job_count(settings)
    body = {"kind": "selftest", "host": "gpu-a", "name": "x", "scopes": ["admin"]}
    with TestClient(app) as client:
        for method, path, route in routes:
            if (method, path) in PUBLIC:
                continue
            url, scope = concrete(path), required_scope(route)
            anonymous = client.request(method, url, json=body)
            assert anonymous.status_code == 401, (method, path, anonymous.text)
            assert anonymous.json()["code"] == "UNAUTHENTICATED"
            assert anonymous.headers["www-authenticate"] == "Bearer"
            assert (
                client.request(
                    method, url, json=body, headers={"Authorization": "Bearer eyas_wrong"}
                ).status_code
                == 401
            )
            assert scope is not None
            if scope in SMALLER_SCOPE:
                weak = client.request(method, url, json=body, headers=token_for(SMALLER_SCOPE[scope]))
                assert weak.status_code == 403, (method, path, weak.text)
                assert weak.json()["code"] == "FORBIDDEN"
            allowed = client.request(method, url, json=body, headers=token_for(scope))
            assert allowed.status_code not in (401, 403), (method, path, allowed.text)
    assert job_count(settings) == jobs_before, "a refused request created a job"


def test_public_routes_answer_without_a_token(client: TestClient) -> None:
    for path in ("/healthz", "/"):
        assert client.get(path).status_code == 200, path


def test_tokens_are_stored_only_as_hashes(client: TestClient, admin: Headers, settings: Settings) -> None:
    created = client.post("/v1/tokens", json={"name": "ci", "scopes": ["submit"]}, headers=admin).json()
    secret = created["token"]
    assert secret.startswith("eyas_")
    assert len(secret) > 40
    with session_scope(settings) as session:
        rows = [str(tuple(r)) for r in session.execute(text("SELECT * FROM api_token"))]
        stored = session.execute(
            text("SELECT token_hash, prefix FROM api_token WHERE id = :id"), {"id": uuid.UUID(created["id"])}
        ).one()
    assert not any(secret in row or secret[9:] in row for row in rows), "the secret is stored in clear"
    assert stored.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret.startswith(stored.prefix)
    assert len(stored.prefix) <= 9
    listed = client.get("/v1/tokens", headers=admin).json()
    assert all("token" not in t and "token_hash" not in t for t in listed)


def test_a_revoked_token_stops_at_once_on_every_replica_without_the_principal_cache(
    settings: Settings, admin: Headers
) -> None:
    uncached = settings.model_copy(update={"auth_cache_s": 0})
    with TestClient(create_app(uncached)) as first, TestClient(create_app(uncached)) as second:
        created, doomed = used_on_both(first, second, admin)
        assert first.post(f"/v1/tokens/{created['id']}/revoke", headers=admin).json()["revoked_at"]
        for replica in (first, second):
            response = replica.get("/v1/jobs", headers=doomed)
            assert response.status_code == 401
            assert response.json()["code"] == "UNAUTHENTICATED"


def test_with_the_cache_a_revocation_is_immediate_where_made_and_bounded_elsewhere(
    settings: Settings, admin: Headers
) -> None:
    cached = settings.model_copy(update={"auth_cache_s": 30})
    clock = ManualClock()  # both replicas read it: the cache period passes when the test says so
    with (
        TestClient(create_app(cached, clock=clock)) as first,
        TestClient(create_app(cached, clock=clock)) as second,
    ):
        created, doomed = used_on_both(first, second, admin)
        assert first.post(f"/v1/tokens/{created['id']}/revoke", headers=admin).json()["revoked_at"]
        assert first.get("/v1/jobs", headers=doomed).status_code == 401
        clock.advance(cached.auth_cache_s - 0.1)
        assert second.get("/v1/jobs", headers=doomed).status_code == 200, "the other replica's cache is used"
        clock.advance(0.2)
        assert second.get("/v1/jobs", headers=doomed).status_code == 401, "accepted past the cache period"


def used_on_both(first: TestClient, second: TestClient, admin: Headers) -> tuple[dict[str, Any], Headers]:
    """A new read token, used once on each replica (so each has it cached when caching is on)."""
    created = first.post("/v1/tokens", json={"name": "doomed", "scopes": ["read"]}, headers=admin).json()
    doomed = {"Authorization": f"Bearer {created['token']}"}
    assert first.get("/v1/jobs", headers=doomed).status_code == 200
    assert second.get("/v1/jobs", headers=doomed).status_code == 200
    return created, doomed


def test_failed_authentications_are_rate_limited_per_client(settings: Settings, admin: Headers) -> None:
    limit = settings.auth_failures_per_minute
    app = create_app(settings)
    with (
        TestClient(app, client=("10.0.0.1", 5000)) as attacker,
        TestClient(app, client=("10.0.0.2", 5000)) as other,
    ):
        for attempt in range(limit):
            response = attacker.get("/v1/jobs", headers={"Authorization": f"Bearer eyas_guess{attempt}"})
            assert response.status_code == 401, attempt
        for refused in (
            attacker.get("/v1/jobs", headers={"Authorization": "Bearer eyas_one_more"}),
            attacker.get("/v1/jobs"),  # no token at all is a failure too
            attacker.post("/v1/jobs", json={"kind": "selftest"}, headers={"Authorization": "Bearer x"}),
        ):
            assert refused.status_code == 429
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert refused.json()["code"] == "RATE_LIMITED"
            retry_after = int(refused.headers["retry-after"])
            assert 1 <= retry_after <= 60, retry_after
            assert refused.json()["retry_after_s"] == retry_after
        assert other.get("/v1/jobs", headers=admin).status_code == 200, "other clients are not affected"


def test_a_valid_token_is_never_throttled_by_its_address_failures(settings: Settings, admin: Headers) -> None:
    limit = settings.auth_failures_per_minute
    app = create_app(settings.model_copy(update={"auth_cache_s": 0}))  # every request reads its token row
    with TestClient(app, client=("10.0.0.9", 5000)) as shared:  # e.g. one NAT address for a whole team
        for attempt in range(limit * 2):
            shared.get("/v1/jobs", headers={"Authorization": f"Bearer eyas_guess{attempt}"})
        assert shared.get("/v1/jobs", headers={"Authorization": "Bearer eyas_bad"}).status_code == 429
        for _ in range(3):
            valid = shared.get("/v1/jobs", headers=admin)
            assert valid.status_code == 200, valid.text
        fresh = {"Authorization": f"Bearer {make_token(settings, Scope.READ, name='late')}"}
        assert shared.get("/v1/jobs", headers=fresh).status_code == 200  # first seen during the lockout
        weak = shared.post("/v1/tokens", json={"name": "x", "scopes": ["read"]}, headers=fresh)
        assert weak.status_code == 403  # a valid token is judged on its scope, not throttled
        assert shared.get("/v1/jobs", headers={"Authorization": "Bearer eyas_bad"}).status_code == 429


def test_only_counted_failures_lock_and_the_lock_opens_after_the_window() -> None:
    clock = ManualClock()
    limiter = FailureLimiter(per_minute=3, clock=clock)
    for _ in range(3):
        assert limiter.retry_after("a") is None
        limiter.record_failure("a")
    assert limiter.retry_after("a") == 60
    assert limiter.retry_after("b") is None
    clock.advance(59.5)
    assert limiter.retry_after("a") == 1  # still inside the minute: rounded up to a whole second
    clock.advance(0.6)
    assert limiter.retry_after("a") is None
