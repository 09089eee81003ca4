"""All SQL about hosts and GPU leases."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.models.host import GpuLease, Host


def get(session: Session, name: str) -> Host | None:
    return session.get(Host, name)


def hold(session: Session, name: str) -> None:
    """Hold `name`'s row until the transaction ends: a no-op UPDATE, a row lock in PostgreSQL and the
    write lock in SQLite, so that a second transaction holding it waits for the first to commit."""
    session.execute(update(Host).where(Host.name == name).values(name=Host.name))


def all_hosts(session: Session) -> list[Host]:
    return list(session.scalars(select(Host).order_by(Host.name)))


def add(session: Session, host: Host) -> None:
    session.add(host)


def leases(session: Session, host: str | None = None) -> list[GpuLease]:
    query = select(GpuLease).order_by(GpuLease.host, GpuLease.gpu_index)
    if host is not None:
        query = query.where(GpuLease.host == host)
    return list(session.scalars(query))


def leased_indices(session: Session, host: str) -> set[int]:
    return set(session.scalars(select(GpuLease.gpu_index).where(GpuLease.host == host)))


def add_leases(session: Session, host: str, indices: Sequence[int], job_id: uuid.UUID) -> None:
    session.add_all(GpuLease(host=host, gpu_index=i, job_id=job_id) for i in indices)


def release_leases(session: Session, job_id: uuid.UUID) -> int:
    result = session.execute(delete(GpuLease).where(GpuLease.job_id == job_id))
    return int(result.rowcount)  # type: ignore[attr-defined]
