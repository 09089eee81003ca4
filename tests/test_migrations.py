"""Migrations run up and down on both PostgreSQL and SQLite, and match the models."""

from __future__ import annotations

import secrets
from pathlib import Path

import psycopg
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from app.models import Base
from tests.conftest import PG_ADMIN_URL

ROOT = Path(__file__).resolve().parents[1]


def config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.attributes["url"] = url
    return cfg


def check_round_trip(url: str) -> None:
    command.upgrade(config(url), "head")
    engine = create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert not [d for d in diff if d[0] not in ("modify_type",)], diff
    assert "job" in inspect(engine).get_table_names()
    command.downgrade(config(url), "base")
    assert "job" not in inspect(engine).get_table_names()
    engine.dispose()


def test_sqlite(tmp_path: Path) -> None:
    check_round_trip(f"sqlite:///{tmp_path / 'm.sqlite'}")


def test_postgresql() -> None:
    name = f"eyas_mig_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        check_round_trip(f"{base}/{name}")
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
