"""Where a finished job's result goes besides the job row: recorders by job kind.

A domain that keeps results in its own tables (benchmarks: comparison tables) has a recorder registered
here by an explicit call at start-up (app/recorders.py: create_app and the worker's build call it), so the
shared finishing path in lifecycle names no kind.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

ResultRecorder = Callable[[Session, uuid.UUID, dict[str, Any]], None]

_recorders: dict[str, ResultRecorder] = {}


def register(kind: str, recorder: ResultRecorder) -> None:
    _recorders[kind] = recorder


def recorder_for(kind: str) -> ResultRecorder | None:
    return _recorders.get(kind)


def record(session: Session, *, job_id: uuid.UUID, kind: str, result: dict[str, Any] | None) -> None:
    """Hand a finished job's non-empty result to its kind's recorder, if one is registered."""
    recorder = _recorders.get(kind)
    if recorder is not None and result:
        recorder(session, job_id, result)
