"""Engine and sessions. One engine per process (created lazily, never inherited across fork)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Dialect, Engine, create_engine, event, text
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from app.core.config import Settings, get_settings
from contract.params.text import may_hold_surrogates, scrub

_engines: dict[tuple[int, str], Engine] = {}


def get_engine(settings: Settings | None = None) -> Engine:
    settings = settings or get_settings()
    url = settings.resolved_database_url()
    key = (os.getpid(), url)
    engine = _engines.get(key)
    if engine is None:
        engine = _make_engine(url)
        _engines[key] = engine
    return engine


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, json_deserializer=load_json
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_engine(
        url,
        pool_size=10,
        max_overflow=20,
        pool_recycle=1800,
        pool_use_lifo=True,  # the connection used last is taken first: it stays warm, the others age
        json_deserializer=load_json,
    )
    event.listen(engine, "checkin", _checked_in)
    event.listen(engine, "checkout", _pinger(engine.dialect))
    return engine


# A connection is pinged when it is taken from the pool only if it sat there this long: SQLAlchemy's
# pool_pre_ping pinged on every checkout, one more round trip before each transaction (the worker's claim,
# its `running`, every API request). A connection used less than a second ago that the database dropped since
# (a restart within that second) fails its first statement instead: SQLAlchemy then discards every pooled
# connection older than the failure, the worker's claim retries once on a fresh one (workers/runner.py),
# its other writes retry already, and an API request answers 503 once.
PING_AFTER_IDLE_S = 1.0


def _checked_in(_dbapi_conn: Any, record: Any) -> None:
    record.info["idle_since"] = time.monotonic()


def _pinger(dialect: Dialect) -> Callable[[Any, Any, Any], None]:
    def ping_if_idle(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return  # a new connection, or one in use a moment ago
        try:
            dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise DisconnectionError("a pooled connection did not answer") from exc  # the pool reconnects

    return ping_if_idle


def load_json(text: str | bytes) -> Any:
    """Every JSON column as read: a lone surrogate stored before input was checked (JSON text can escape
    one, "\\ud800") becomes U+FFFD, so no stored row can make a listing fail to serialise."""
    value = json.loads(text)
    return scrub(value) if may_hold_surrogates(text) else value


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the API read while a worker writes; busy_timeout waits instead of failing on a lock.
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


_factories: dict[tuple[Engine, bool], sessionmaker[Session]] = {}


def dispose_engines() -> None:
    for engine in _engines.values():
        engine.dispose()
    _engines.clear()
    _factories.clear()


def session_factory(settings: Settings | None = None, *, autocommit: bool = False) -> sessionmaker[Session]:
    """Sessions on this process's engine (the maker made once per engine); `autocommit`: autocommit_scope."""
    engine = get_engine(settings)
    factory = _factories.get((engine, autocommit))
    if factory is None:
        bind = engine
        if autocommit and engine.dialect.name == "postgresql":
            bind = engine.execution_options(isolation_level="AUTOCOMMIT")  # same pool, per-use setting
        factory = _factories[(engine, autocommit)] = sessionmaker(bind=bind, expire_on_commit=False)
    return factory


@contextmanager
def session_scope(settings: Settings | None = None) -> Iterator[Session]:
    """A short transaction: commit on success, roll back on error, always close."""
    with _scope(session_factory(settings)) as session:
        yield session


@contextmanager
def autocommit_scope(settings: Settings | None = None) -> Iterator[Session]:
    """For a write that is one statement, complete on its own (the worker's claim, its `running`): on
    PostgreSQL each statement commits by itself, so there is no BEGIN and no COMMIT round trip, and a row it
    locks is locked only while the statement runs. Several statements here are several transactions. On
    SQLite (embedded mode, one machine) it is an ordinary transaction, committed at the end."""
    with _scope(session_factory(settings, autocommit=True)) as session:
        yield session


@contextmanager
def _scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def ping(settings: Settings) -> tuple[bool, str]:
    """Whether the database answers a trivial query."""
    try:
        with get_engine(settings).connect() as conn:
            conn.execute(text("SELECT 1"))
        return True, "ok"
    except Exception as exc:  # noqa: BLE001 - a readiness probe reports any failure, it never raises
        return False, type(exc).__name__
