"""Artifacts (hidden-state sets, checkpoints, servers, reports) and their lineage. Services never commit."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from app.artifacts import repository
from app.core.errors import found_or_404
from app.core.paging import decode_cursor, page_of
from app.jobs import refs
from app.jobs import repository as jobs_repo
from app.models.artifact import Artifact
from app.models.base import utcnow


def record_artifact(
    session: Session, *, job_id: uuid.UUID, host: str | None, kind: str, path: str, meta: dict[str, Any]
) -> Artifact:
    """Record what a job produced. Its parents are the artifacts its params were filled from, or else every
    artifact of the jobs it depended on."""
    job = jobs_repo.get(session, job_id)
    chosen = refs.referenced(session, job) if job is not None and job.param_refs else []
    if not chosen:
        chosen = repository.for_jobs(session, jobs_repo.dependency_ids(session, job_id))
    parents = [str(a.id) for a in chosen]
    size = meta.get("bytes")
    artifact = Artifact(
        id=uuid.uuid4(),
        job_id=job_id,
        kind=kind[:64],
        host=host,
        path=path,
        bytes=int(size) if isinstance(size, int | float) else None,
        meta=meta,
        parent_ids=parents,
        created_at=utcnow(),
    )
    repository.add(session, artifact)
    return artifact


def get_artifact(session: Session, artifact_id: uuid.UUID) -> Artifact:
    return found_or_404(repository.get(session, artifact_id), f"no artifact {artifact_id}")


def list_artifacts(
    session: Session, *, kind: str | None, job_id: uuid.UUID | None, cursor: str | None, limit: int
) -> tuple[list[Artifact], str | None]:
    """Artifacts, newest first, a page at a time, and the next page's cursor."""
    rows = repository.page(session, kind=kind, job_id=job_id, after=decode_cursor(cursor), limit=limit + 1)
    return page_of(rows, limit, lambda a: (a.created_at, a.id))


def ancestors(session: Session, artifact: Artifact, *, limit: int = 100) -> list[Artifact]:
    """Every artifact this one was made from, transitively (nearest first)."""
    seen: dict[uuid.UUID, Artifact] = {}
    frontier = [uuid.UUID(p) for p in artifact.parent_ids]
    while frontier and len(seen) < limit:
        parent = repository.get(session, frontier.pop(0))
        if parent is None or parent.id in seen:
            continue
        seen[parent.id] = parent
        frontier += [uuid.UUID(p) for p in parent.parent_ids]
    return list(seen.values())
