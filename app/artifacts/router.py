"""/v1/artifacts: what jobs produced (hidden states, checkpoints, servers, reports) and what from."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from app.artifacts import service
from app.artifacts.schemas import ArtifactLineage, ArtifactPage, ArtifactRead
from app.core.deps import SessionDep
from app.core.paging import PageCursor
from app.tokens.deps import ReadPrincipal

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"])


@router.get("", response_model=ArtifactPage)
def list_artifacts(
    session: SessionDep,
    _: ReadPrincipal,
    kind: Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")] = None,
    job_id: uuid.UUID | None = None,
    cursor: PageCursor = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ArtifactPage:
    """Artifacts, newest first, with cursor pagination."""
    rows, next_cursor = service.list_artifacts(session, kind=kind, job_id=job_id, cursor=cursor, limit=limit)
    return ArtifactPage(items=[ArtifactRead.model_validate(a) for a in rows], next_cursor=next_cursor)


@router.get("/{artifact_id}", response_model=ArtifactLineage)
def get_artifact(artifact_id: uuid.UUID, session: SessionDep, _: ReadPrincipal) -> ArtifactLineage:
    """One artifact with its lineage: every artifact it was made from."""
    artifact = service.get_artifact(session, artifact_id)
    parents = [ArtifactRead.model_validate(a) for a in service.ancestors(session, artifact)]
    return ArtifactLineage(**ArtifactRead.model_validate(artifact).model_dump(), ancestors=parents)
