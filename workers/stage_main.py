"""Entry point of a stage's child process: `python -m workers.stage_main --kind K --params-file P …`.

The worker starts every job this way, through the process runner, so a job's output is its log, cancel is
a signal to its process group, and a worker that dies leaves a recorded group it can end on restart.
Structured events (progress, metrics, artifacts, the result) go as JSON lines to the file descriptor
given by --event-fd, never mixed with the log.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from workers.params import STAGE_SPECS
from workers.params.common import StageParams
from workers.stages import load_stage
from workers.stages.base import StageCancelled, StageContext, StageError, TerminationReason

EXIT_CANCELLED = 130


class FdSink:
    """Writes events as JSON lines to a pipe the worker reads."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
        self._lock = threading.Lock()

    def emit(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="workers.stage_main")
    parser.add_argument("--kind", required=True, choices=sorted(STAGE_SPECS))
    parser.add_argument("--params-file", required=True, type=Path)
    parser.add_argument("--event-fd", required=True, type=int)
    parser.add_argument("--work-dir", required=True, type=Path)
    parser.add_argument("--job-id", default=None)
    parser.add_argument("--gpus", default="")
    parser.add_argument("--allowed-root", action="append", default=[], type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    sink = FdSink(args.event_fd)
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda _sig, _frame: cancel.set())
    ctx = StageContext(
        work_dir=args.work_dir,
        sink=sink,
        gpus=tuple(int(g) for g in args.gpus.split(",") if g),
        allowed_roots=tuple(args.allowed_root),
        cancel=cancel,
        job_id=args.job_id,
    )
    raw = json.loads(args.params_file.read_text())
    params = STAGE_SPECS[args.kind].params_model().model_validate(raw)
    return _run(ctx, sink, args.kind, params)


def _run(ctx: StageContext, sink: FdSink, kind: str, params: StageParams) -> int:
    try:
        for path in params.host_paths():
            ctx.check_path(path)
        result = load_stage(kind)(ctx, params)
    except StageCancelled:
        sink.emit({"type": "error", "reason": TerminationReason.USER_CANCELLED, "message": "cancelled"})
        return EXIT_CANCELLED
    except StageError as exc:
        print(f"error: {exc.message}", file=sys.stderr, flush=True)
        sink.emit({"type": "error", "reason": exc.reason, "message": exc.message, "details": exc.details})
        return exc.exit_code or 1
    except Exception as exc:
        traceback.print_exc()
        sink.emit(
            {
                "type": "error",
                "reason": TerminationReason.STAGE_ERROR,
                "message": f"{type(exc).__name__}: {exc}",
            }
        )
        return 1
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    sink.emit({"type": "result", "result": result if isinstance(result, dict) else {"value": result}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
