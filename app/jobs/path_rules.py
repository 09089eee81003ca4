"""Where a job's paths may be, judged when it is submitted (the worker judges again where they resolve).

Every host path must lie under one of the host's allowed roots. An output (a folder or file the stage
makes, replaces or appends to: OutputPath in contract/params) must also not be, contain or lie inside
eyas's data directory, its install or an allowed root itself (contract/paths.py), nor any path that a job
of the same host that has not ended declared, as input or output: replacing or writing into it would
destroy or corrupt that job's data while it runs or waits to.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.errors import AppError, ErrorCode
from app.hosts import service as hosts_service
from app.jobs import repository
from contract.params.common import StageParams
from contract.paths import normal, output_problem, overlap


def check_job_paths(session: Session, settings: Settings, host: str, params: StageParams) -> None:
    """422 PATH_NOT_ALLOWED naming the rule a path of `params` breaks; nothing is stored. Holds the host
    until the caller's commit, so two jobs sent at once are judged one after the other: the second sees
    the first's paths."""
    if params.host_paths():
        hosts_service.hold_host(session, host)
    known = hosts_service.find_host(session, host)
    roots = known.allowed_roots if known is not None else []
    if roots:  # with none registered, the worker checks them against its own, with symlinks resolved
        for path in params.host_paths():
            if not any(overlap(path, root) in ("is", "lies inside") for root in roots):
                _refuse(f"{path} is outside the allowed roots of host {host!r}: {', '.join(roots)}", path)
    outputs = params.output_paths()
    if not outputs:
        return
    data_dirs = sorted({normal(settings.data_dir), normal(settings.data_dir.resolve())})
    for path in outputs:
        problem = output_problem(path, data_dirs=data_dirs, roots=roots)
        if problem is not None:
            _refuse(problem, path)
    for job_id, kind, other in repository.unfinished_params(session, host):
        for declared in _declared_paths(other):
            for path in outputs:
                how = overlap(path, declared)
                if how is not None:
                    _refuse(
                        f"{path} {how} {declared}, a path of {kind} job {job_id} that has not ended; an "
                        "output may not replace, hold or go inside another job's data",
                        path,
                        other_job=str(job_id),
                    )


def _refuse(message: str, path: str, **extra: Any) -> None:
    raise AppError(
        ErrorCode.PATH_NOT_ALLOWED,
        message,
        errors=[{"field": "params", "message": message, "path": path}],
        **extra,
    )


def _declared_paths(params: Any) -> Iterator[str]:
    """Every absolute path among a stored job's params, at any depth (an extra_args `--flag=/path` too)."""
    if isinstance(params, str):
        value = params.partition("=")[2] if params.startswith("--") else params
        if value.startswith("/") and "\n" not in value:
            yield value
    elif isinstance(params, dict):
        for item in params.values():
            yield from _declared_paths(item)
    elif isinstance(params, list):
        for item in params:
            yield from _declared_paths(item)
