"""Artifact passing: a job's params may name another job's artifact, filled in when the job is queued."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from app.artifacts import service as artifacts
from app.jobs.params import validate_params
from app.models.artifact import Artifact
from app.models.job import Job


class MissingArtifact(Exception):
    pass


def ref(job_id: uuid.UUID, artifact_kind: str) -> dict[str, str]:
    return {"job": str(job_id), "artifact": artifact_kind}


def referenced(session: Session, job: Job) -> list[Artifact]:
    """The exact artifacts the job's params were filled from (its lineage parents)."""
    found = (_newest(session, source) for source in (job.param_refs or {}).values())
    return [artifact for artifact in found if artifact is not None]


def resolve(session: Session, job: Job) -> dict[str, Any] | None:
    """The job's params with every reference filled from the newest matching artifact; None if it has none."""
    if not job.param_refs:
        return None
    params = _deep_copy(job.params)
    for dotted, source in job.param_refs.items():
        newest = _newest(session, source)
        if newest is None:
            kind = source["artifact"]
            raise MissingArtifact(f"job {source['job']} produced no {kind} artifact for {dotted}")
        _set(params, dotted.split("."), newest.path)
    return params


def fill(session: Session, job: Job) -> None:
    """Fill the job's params from the artifacts its references name, then validate them again (its stage's
    model). The one place references are filled. Raises MissingArtifact, or AppError for invalid params."""
    resolved = resolve(session, job)
    if resolved is not None:
        job.params = validate_params(job.kind, resolved).model_dump(mode="json")


def _newest(session: Session, source: dict[str, str]) -> Artifact | None:
    """The newest artifact of the referenced kind that the referenced job produced."""
    made_by = artifacts.produced_by(session, [uuid.UUID(source["job"])])
    produced = [a for a in made_by if a.kind == source["artifact"]]
    return max(produced, key=lambda a: a.created_at) if produced else None


def _set(params: dict[str, Any], path: list[str], value: str) -> None:
    node = params
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _deep_copy(params: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in params.items()}
