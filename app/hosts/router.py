"""/v1/hosts: GPU hosts with their inventory and leases."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.core.deps import SessionDep, SettingsDep
from app.hosts import service
from app.hosts.schemas import HOST_NAME_PATTERN, HostRead
from app.tokens.deps import ReadPrincipal

router = APIRouter(prefix="/v1/hosts", tags=["hosts"])


@router.get("", response_model=list[HostRead])
def list_hosts(session: SessionDep, settings: SettingsDep, _: ReadPrincipal) -> list[HostRead]:
    """Every host a worker registered: online or not, GPUs, processes, leases."""
    return [HostRead.model_validate(v) for v in service.host_views(session, settings)]


@router.get("/{name}", response_model=HostRead)
def get_host(
    name: Annotated[str, Path(pattern=HOST_NAME_PATTERN)],
    session: SessionDep,
    settings: SettingsDep,
    _: ReadPrincipal,
) -> HostRead:
    """One host."""
    return HostRead.model_validate(service.host_views(session, settings, name)[0])
