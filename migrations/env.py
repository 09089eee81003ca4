"""Alembic environment: the URL comes from eyas's Settings (or -x url=…), the metadata from app.models."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from app.core.config import get_settings
from app.models import Base
from app.models.base import UtcDateTime

target_metadata = Base.metadata


def _url() -> str:
    override = context.get_x_argument(as_dictionary=True).get("url")
    return override or context.config.attributes.get("url") or get_settings().resolved_database_url()


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connectable = context.config.attributes.get("connection")
    if connectable is not None:
        _run(connectable)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _run(connection)


def _render_item(kind: str, obj: object, autogen_context: object) -> str | bool:
    # Migrations must not import app code: render eyas's UTC column type as the plain type it wraps.
    if kind == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _run(connection: object) -> None:
    context.configure(
        connection=connection, target_metadata=target_metadata, render_as_batch=True, render_item=_render_item
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
