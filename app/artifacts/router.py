"""/v1/artifacts: what jobs produced (hidden states, checkpoints, servers, reports) and what from."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from app.artifacts import service
from app.artifacts.schemas import ArtifactLineage, ArtifactRead
from app.core.deps import SessionDep
from app.tokens.deps import ReadPrincipal

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"])


@router.get("", response_model=list[ArtifactRead])
def list_artifacts(
    session: SessionDep,
    _: ReadPrincipal,
    kind: Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")] = None,
    job_id: uuid.UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[ArtifactRead]:
    """Artifacts, newest first."""
    return [
        ArtifactRead.model_validate(a)
        for a in service.list_artifacts(session, kind=kind, job_id=job_id, limit=limit)
    ]


@router.get("/{artifact_id}", response_model=ArtifactLineage)
def get_artifact(artifact_id: uuid.UUID, session: SessionDep, _: ReadPrincipal) -> ArtifactLineage:
    """One artifact with its lineage: every artifact it was made from."""
    artifact = service.get_artifact(session, artifact_id)
    parents = [ArtifactRead.model_validate(a) for a in service.ancestors(session, artifact)]
    return ArtifactLineage(**ArtifactRead.model_validate(artifact).model_dump(), ancestors=parents)
