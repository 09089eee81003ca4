"""Artifacts (hidden-state sets, checkpoints, servers, reports) and their lineage. Services never commit."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.artifacts import repository
from app.core.errors import found_or_404
from app.core.paging import decode_cursor, page_of
from app.models.artifact import Artifact
from app.models.base import utcnow


def record_artifact(
    session: Session,
    *,
    job_id: uuid.UUID,
    host: str | None,
    kind: str,
    path: str,
    meta: dict[str, Any],
    parents: Sequence[Artifact],
) -> Artifact:
    """Record what a job produced, made from `parents`. Which artifacts those are is the jobs domain's rule
    (app/jobs/lifecycle.py: record_artifact), so this domain knows nothing of jobs."""
    size = meta.get("bytes")
    artifact = Artifact(
        id=uuid.uuid4(),
        job_id=job_id,
        kind=kind[:64],
        host=host,
        path=path,
        bytes=int(size) if isinstance(size, int | float) else None,
        meta=meta,
        parent_ids=[str(a.id) for a in parents],
        created_at=utcnow(),
    )
    repository.add(session, artifact)
    return artifact


def produced_by(session: Session, job_ids: list[uuid.UUID]) -> list[Artifact]:
    """Every artifact the given jobs produced."""
    return repository.for_jobs(session, job_ids)


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
