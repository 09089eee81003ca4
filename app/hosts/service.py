"""Hosts: registration and heartbeats from workers, placement of jobs, exclusive GPU leases."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.errors import AppError, ErrorCode, found_or_404
from app.hosts import repository
from app.models.base import utcnow
from app.models.host import Host


def is_online(host: Host, settings: Settings) -> bool:
    return host.heartbeat_at >= utcnow() - timedelta(seconds=settings.host_offline_after_s)


def record_heartbeat(
    session: Session,
    *,
    name: str,
    worker: str,
    gpus: list[dict[str, Any]],
    gpu_error: str | None,
    shm: dict[str, Any] | None,
    allowed_roots: list[str],
    info: dict[str, Any] | None = None,
) -> Host:
    """Upsert the host row with its current inventory (called by its worker every heartbeat)."""
    host = repository.get(session, name)
    if host is None:
        host = Host(name=name)
        repository.add(session, host)
    host.heartbeat_at = utcnow()
    host.worker = worker
    host.gpus = gpus
    host.gpu_count = len(gpus)
    host.gpu_error = gpu_error
    host.shm = shm
    host.allowed_roots = allowed_roots
    host.info = info
    session.flush()
    return host


def find_host(session: Session, name: str) -> Host | None:
    return repository.get(session, name)


def hold_host(session: Session, name: str) -> None:
    """One transaction at a time judges and stores jobs for `name` (the path rules read the jobs that have
    not ended, then the new one is stored): held until the caller's commit."""
    repository.hold(session, name)


def get_host(session: Session, name: str) -> Host:
    return found_or_404(repository.get(session, name), f"no host named {name!r} has registered")


def place(session: Session, settings: Settings, *, gpus: int, host: str | None) -> str:
    """Choose the host a new job runs on, or refuse now if no registered host could ever run it."""
    if host is not None:
        known = repository.get(session, host)
        if known is None:
            raise _unknown_host(session, host)
        if gpus > known.gpu_count:
            raise AppError(
                ErrorCode.NO_HOST_CAN_SATISFY,
                f"host {host!r} has {known.gpu_count} GPU(s); the job asks for {gpus}"
                + (f" ({known.gpu_error})" if known.gpu_error else ""),
            )
        return host
    candidates = [h for h in repository.all_hosts(session) if h.gpu_count >= gpus]
    if not candidates:
        raise AppError(
            ErrorCode.NO_HOST_CAN_SATISFY,
            f"no registered host has {gpus} GPU(s); start a worker on such a host or name one with 'host'",
        )
    online = [h for h in candidates if is_online(h, settings)]
    pool = online or candidates
    leased = {h.name: len(repository.leased_indices(session, h.name)) for h in pool}
    return min(pool, key=lambda h: (leased[h.name] - h.gpu_count, h.name)).name


def _unknown_host(session: Session, name: str) -> AppError:
    """A host that never registered: no worker consumes its queue, so a job there would wait forever. A
    host that registered and is offline is known (its jobs wait for its worker to come back)."""
    known = sorted(h.name for h in repository.all_hosts(session))
    listed = f"known hosts: {', '.join(known)}" if known else "no host has registered yet"
    return AppError(
        ErrorCode.UNKNOWN_HOST,
        f"no host {name!r} has registered ({listed}); a host registers when its worker starts",
        errors=[{"field": "host", "message": "no such host"}],
        known_hosts=known,
    )


def gpus_if_present(session: Session, *, host: str | None, wanted: int) -> int:
    """`wanted` if the named host (or, with none named, some registered host) has that many GPUs, else 0."""
    if host is not None:
        known = repository.get(session, host)
        return wanted if known is None or known.gpu_count >= wanted else 0
    return wanted if any(h.gpu_count >= wanted for h in repository.all_hosts(session)) else 0


def try_acquire_gpus(session: Session, *, host: str, count: int, job_id: uuid.UUID) -> list[int] | None:
    """Lease `count` free GPUs of `host` to the job; None when not enough are free right now."""
    known = repository.get(session, host)
    if known is None:
        return None
    free = [g["index"] for g in known.gpus if g["index"] not in repository.leased_indices(session, host)]
    if len(free) < count:
        return None
    chosen = sorted(free)[:count]
    try:
        with session.begin_nested():
            repository.add_leases(session, host, chosen, job_id)
    except IntegrityError:
        return None  # another job leased one of them first
    return chosen


def release_gpus(session: Session, job_id: uuid.UUID) -> int:
    return repository.release_leases(session, job_id)


def host_views(session: Session, settings: Settings, name: str | None = None) -> list[dict[str, Any]]:
    """Hosts with their online flag and current leases, ready for HostRead."""
    hosts = [get_host(session, name)] if name else repository.all_hosts(session)
    leases = repository.leases(session, name)
    views = []
    for host in hosts:
        own = [
            {"gpu_index": lease.gpu_index, "job_id": lease.job_id, "acquired_at": lease.acquired_at}
            for lease in leases
            if lease.host == host.name
        ]
        views.append(
            {
                "name": host.name,
                "online": is_online(host, settings),
                "heartbeat_at": host.heartbeat_at,
                "registered_at": host.registered_at,
                "worker": host.worker,
                "gpu_count": host.gpu_count,
                "gpus": host.gpus,
                "gpu_error": host.gpu_error,
                "shm": host.shm,
                "allowed_roots": host.allowed_roots,
                "info": host.info,
                "leases": own,
            }
        )
    return views
