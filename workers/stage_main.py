"""Entry point of a stage's child process: `python -m workers.stage_main --kind K --params-file P …`.

The worker starts every job's process through the process runner, so a job's output is its log, cancel is
a signal to its process group, and a worker that dies leaves a recorded group it can end on restart. It
starts it before the job exists, as `--job-socket FD` (workers/warm.py): the process does the imports below,
then waits on FD for its job's arguments (workers/handoff.py), so a job does not wait for an interpreter.
Structured events (progress, metrics, artifacts, the result) go as JSON lines to the file descriptor
given by --event-fd, never mixed with the log. A torchrun rank (drafting/stages/_torchrun.py) writes them to
the FIFO given by --event-fifo instead, tagged with its rank.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from contract.events import ErrorEvent, ResultEvent, to_line
from contract.params.common import StageParams
from contract.reasons import TerminationReason
from contract.stages import STAGES
from drafting.context import EventSink, StageCancelled, StageContext, StageError
from drafting.safepaths import PathGuard, PathRefused
from drafting.stages import load_stage
from drafting.userfiles import Cap, UserFileError, read_user_json
from workers import handoff

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


class RankSink:
    """A torchrun rank's events, written to its launcher's FIFO. Only rank 0 reports progress, metrics and
    results; other ranks' events (errors) are kept under PIPE_BUF so a write never interleaves with rank
    0's lines."""

    def __init__(self, fifo: Path) -> None:
        self._fd = os.open(fifo, os.O_WRONLY)
        self._lock = threading.Lock()

    def emit(self, event: dict[str, Any]) -> None:
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_initialized() else None
        data = (json.dumps({**event, "rank": rank}, default=str) + "\n").encode()
        if rank != 0 and len(data) > select.PIPE_BUF:
            short = {"type": event["type"], "reason": event.get("reason"), "rank": rank}
            short["message"] = str(event.get("message", ""))[: select.PIPE_BUF // 2]
            data = (json.dumps(short) + "\n").encode()
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        """The rank's last act: leave torchrun's process group (its events carry the rank until then)."""
        from drafting.ml import distributed

        distributed.leave()
        os.close(self._fd)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="workers.stage_main")
    parser.add_argument("--kind", required=True, choices=sorted(STAGES))
    parser.add_argument("--params-file", required=True, type=Path)
    events = parser.add_mutually_exclusive_group(required=True)
    events.add_argument("--event-fd", type=int)
    events.add_argument("--event-fifo", type=Path, help="a torchrun rank's event channel")
    parser.add_argument("--work-dir", required=True, type=Path)
    parser.add_argument("--job-id", default=None)
    parser.add_argument("--gpus", default="")
    parser.add_argument("--allowed-root", action="append", default=[], type=Path)
    parser.add_argument(
        "--data-dir", default=None, type=Path, help="the worker's data folder (never written)"
    )
    parser.add_argument(
        "--inherited-views", default=None, type=Path, help="a torchrun rank's launcher's views"
    )
    parser.add_argument("--allow-remote-code", action="store_true", help="the host allows trust_remote_code")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--job-socket":
        taken = handoff.receive(int(argv[1]))  # a warm process waits here for its job
        if taken is None:
            return 0  # its worker stopped before it had a job for it
        job_args, event_fd = taken
        argv = [*job_args, "--event-fd", str(event_fd)]
    args = _parse_args(argv)
    sink: FdSink | RankSink = RankSink(args.event_fifo) if args.event_fifo else FdSink(args.event_fd)
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda _sig, _frame: cancel.set())
    ctx = StageContext(
        work_dir=args.work_dir,
        sink=sink,
        gpus=tuple(int(g) for g in args.gpus.split(",") if g),
        allowed_roots=tuple(args.allowed_root),
        allow_remote_code=args.allow_remote_code,
        cancel=cancel,
        job_id=args.job_id,
        data_dir=args.data_dir,
        inherited_views=args.inherited_views,
    )
    try:
        return _run(ctx, sink, args.kind, args.params_file)
    finally:
        if isinstance(sink, RankSink):
            sink.close()


def _load_params(kind: str, params_file: Path) -> StageParams:
    raw = read_user_json(params_file, Cap.SPEC, "params file")
    params: StageParams = STAGES[kind].parse(raw)
    return params


class DescribedSink:
    """Events with the user's paths in them, not the views the stage used (drafting/safepaths.py)."""

    def __init__(self, inner: EventSink, guard: PathGuard) -> None:
        self._inner, self._guard = inner, guard

    def emit(self, event: dict[str, Any]) -> None:
        self._inner.emit(self._guard.describe_all(event))


def pinned_params(guard: PathGuard, kind: str, params: StageParams) -> StageParams:
    """The params with every host path, nested ones included, replaced by what the stage must use: an
    input by its view (resolved beneath its allowed root now, held open), an output by <its pinned parent
    folder's view>/<its name>. From here on no user path is looked up by its name again."""
    outputs = set(params.output_paths())
    swaps: dict[str, str] = {}
    for path in params.host_paths():
        if path not in swaps:
            swaps[path] = str(guard.output_parent(path) if path in outputs else guard.input(path))
    swapped: StageParams = STAGES[kind].parse(_swap_strings(params.model_dump(mode="json"), swaps))
    return swapped


def _swap_strings(value: Any, swaps: dict[str, str]) -> Any:
    if isinstance(value, str):
        flag, equals, inline = value.partition("=")
        if equals and flag.startswith("--") and inline in swaps:  # an extra_args `--flag=/path`
            return f"{flag}={swaps[inline]}"
        return swaps.get(value, value)
    if isinstance(value, dict):
        return {k: _swap_strings(v, swaps) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap_strings(v, swaps) for v in value]
    return value


def _run(ctx: StageContext, sink: EventSink, kind: str, params_file: Path) -> int:
    rank = isinstance(sink, RankSink)
    sink = ctx.sink = DescribedSink(sink, ctx.paths)
    try:
        return _run_described(ctx, sink, kind, params_file, rank=rank)
    finally:
        ctx.paths.close()


def _run_described(ctx: StageContext, sink: EventSink, kind: str, params_file: Path, *, rank: bool) -> int:
    try:
        # The worker's one validation of the params; then every host path (nested ones too) is resolved
        # beneath its allowed root and held, before the stage starts: stages use what ctx and params hold.
        params = pinned_params(ctx.paths, kind, _load_params(kind, params_file))
        result = load_stage(kind)(ctx, params)
    except StageCancelled:
        sink.emit(to_line(ErrorEvent(reason=TerminationReason.USER_CANCELLED, message="cancelled")))
        # A rank that stopped on request exits cleanly: its launcher knows it cancelled, and torchrun would
        # report a non-zero exit as a failed worker.
        return 0 if rank else EXIT_CANCELLED
    except (StageError, UserFileError, PathRefused) as caught:
        # A user-given file a stage refused to read (a FIFO, a device, too large) is bad input, not a crash.
        exc = _as_stage_error(caught)
        print(f"error: {ctx.paths.describe(exc.message)}", file=sys.stderr, flush=True)
        sink.emit(to_line(ErrorEvent(reason=exc.reason, message=exc.message, details=exc.details)))
        return exc.exit_code or 1
    except Exception as exc:  # noqa: BLE001 - any crash of a stage becomes its error event, with the traceback
        traceback.print_exc()
        sink.emit(
            to_line(ErrorEvent(reason=TerminationReason.STAGE_ERROR, message=f"{type(exc).__name__}: {exc}"))
        )
        return 1
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    sink.emit(to_line(ResultEvent(result=result if isinstance(result, dict) else {"value": result})))
    return 0


def _as_stage_error(caught: StageError | UserFileError | PathRefused) -> StageError:
    if isinstance(caught, PathRefused):
        return StageError.refused_path(caught)
    return caught if isinstance(caught, StageError) else StageError.bad_input(caught)


if __name__ == "__main__":
    sys.exit(main())
