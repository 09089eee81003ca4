"""What every stage, and the serving code a stage drives, receives and may raise.

A stage is a plain function `run(ctx, params) -> result`: no database, no Celery, no global settings.
It prints its log (captured line by line by the process runner), and reports structured events
(progress, metrics, artifacts) through `ctx`. This module sits below drafting/stages and drafting/serving,
so the serving code a stage calls takes the same context without importing the stages.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from contract.events import ArtifactEvent, MetricEvent, ProgressEvent, to_line
from contract.reasons import TerminationReason
from drafting.hostinfo import gpus
from drafting.outputs import NotOurs, OutputMark, claim_folder
from drafting.safepaths import DIRECTORY, PathGuard, PathRefused
from drafting.userfiles import UserFileError


class StageError(Exception):
    """A failure the stage understands: it carries a reason and a message for the user."""

    def __init__(
        self,
        message: str,
        *,
        reason: TerminationReason = TerminationReason.STAGE_ERROR,
        details: dict[str, Any] | None = None,
        exit_code: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.details = details or {}
        self.exit_code = exit_code

    @classmethod
    def refused_path(cls, exc: PathRefused) -> StageError:
        """A user path eyas will not use (drafting/safepaths.py): outside the roots, or where no output
        may go."""
        return cls(exc.message, reason=exc.reason, details={"path": exc.path})

    @classmethod
    def bad_input(cls, exc: UserFileError) -> StageError:
        """A user-given path eyas refused to read (drafting/userfiles.py), as a failure naming the path."""
        return cls(
            str(exc),
            reason=TerminationReason.BAD_INPUT,
            details={"path": str(exc.path), "problem": exc.problem},
        )


def remote_code(ctx: StageContext, requested: bool) -> bool:
    """`trust_remote_code` as a stage passes it on: true only when the params ask for it and the host's
    settings allow it (EYAS_ALLOW_REMOTE_CODE), since it runs Python files from the target folder."""
    if requested and not ctx.allow_remote_code:
        raise StageError(
            "trust_remote_code is set, but this host's settings do not allow running a target folder's "
            "own code (EYAS_ALLOW_REMOTE_CODE=true on the worker host)",
            reason=TerminationReason.REMOTE_CODE_NOT_ALLOWED,
        )
    return requested


def out_of_memory(what: str, batch_size: int, seq_len: int, held: Sequence[int]) -> StageError:
    """The error of a CUDA out-of-memory on a batch, naming the GPUs' other holders when there are any: when
    other processes hold the memory, freeing the GPU is the advice, not a smaller batch."""
    holders = gpus.memory_holders(held)
    advice = (
        "lower batch_size or max_len"
        if holders is None
        else f"{holders}; free the GPU, or lower batch_size or max_len"
    )
    return StageError(
        f"{what}: {advice}",
        reason=TerminationReason.OUT_OF_MEMORY,
        details={"batch_size": batch_size, "seq_len": seq_len, "other_holders": holders},
    )


class StageCancelled(Exception):
    """Raised by ctx.check_cancelled() once cancel was requested."""


class EventSink(Protocol):
    """Receives a stage's structured events (the worker ships them to the database)."""

    def emit(self, event: dict[str, Any]) -> None: ...


@dataclass
class RecordingSink:
    """Keeps events in memory: for calling stages directly (tests, the local CLI)."""

    events: list[dict[str, Any]] = field(default_factory=list)

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == event_type]


@dataclass
class StageContext:
    """Everything a stage may use from its surroundings."""

    work_dir: Path
    sink: EventSink = field(default_factory=RecordingSink)
    gpus: Sequence[int] = ()
    allowed_roots: Sequence[Path] = ()
    allow_remote_code: bool = False  # the host's settings let a job run a target folder's own code
    cancel: threading.Event = field(default_factory=threading.Event)
    job_id: str | None = None
    data_dir: Path | None = None
    inherited_views: Path | None = None  # a torchrun rank's: its launcher's views (drafting/safepaths.py)
    guard: PathGuard | None = None

    @property
    def paths(self) -> PathGuard:
        """This process's user paths, resolved beneath the allowed roots and held (drafting/safepaths.py)."""
        if self.guard is None:
            self.guard = PathGuard(
                self.allowed_roots, data_dir=self.data_dir, inherited_views=self.inherited_views
            )
        return self.guard

    def log(self, text: str, *, stream: str = "stdout") -> None:
        out = sys.stderr if stream == "stderr" else sys.stdout
        print(self.paths.describe(text), file=out, flush=True)

    def output_folder(self, path: str | Path, kind: str) -> Path:
        """The output folder at `path`, held open for this stage to write into: made new and marked as
        eyas's, or eyas's own from an earlier run (resume), or an empty folder it marks now. A folder eyas
        did not make, a symlink or a file there fails the job (BAD_INPUT); so does a place no output may go
        (PATH_NOT_ALLOWED: contract/paths.py)."""
        guard = self.paths
        try:
            at = guard.output_parent(path)
            shown = guard.describe(str(at))
            parent_fd = os.open(at.parent, DIRECTORY)
            try:
                fd = claim_folder(parent_fd, at.name, OutputMark(kind, self.job_id), shown=shown)
            finally:
                os.close(parent_fd)
        except PathRefused as exc:
            raise StageError.refused_path(exc) from None
        except NotOurs as exc:
            raise StageError(
                exc.message, reason=TerminationReason.BAD_INPUT, details={"path": shown}
            ) from None
        return guard.view_of(fd, shown)

    def progress(self, fraction: float, message: str = "") -> None:
        message = self.paths.describe(message)
        self.sink.emit(to_line(ProgressEvent(fraction=max(0.0, min(1.0, fraction)), message=message)))

    def metric(self, name: str, value: float, step: int) -> None:
        self.sink.emit(to_line(MetricEvent(name=name, value=float(value), step=int(step))))

    def artifact(self, kind: str, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        """Recorded by the user's path (a view the stage wrote through is named as what it stands for)."""
        shown, meta = self.paths.describe(str(path)), self.paths.describe_all(meta or {})
        self.sink.emit(to_line(ArtifactEvent(kind=kind, path=shown, meta=meta)))

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise StageCancelled()

    def cancel_requested(self) -> bool:
        return self.cancel.is_set()

    def check_path(self, path: str | Path) -> Path:
        """Resolve a path and refuse it unless it lies under an allowed root (symlinks resolved).

        A check by name only: what the name leads to may change before it is used. The stage process
        uses no user path this way; it pins every one (`paths`, drafting/safepaths.py)."""
        resolved = Path(path).resolve()
        if not self.allowed_roots:
            return resolved
        for root in self.allowed_roots:
            if resolved == root.resolve() or resolved.is_relative_to(root.resolve()):
                return resolved
        raise StageError(
            f"path {path} resolves to {resolved}, outside the host's allowed roots "
            f"({', '.join(str(r) for r in self.allowed_roots)})",
            reason=TerminationReason.PATH_NOT_ALLOWED,
        )
