"""Running a stage as several torchrun ranks, from inside the stage's own process.

The worker starts every stage as one process: its log, its cancel and its events all go through it. A
data-parallel stage (extract or train on several GPUs) then starts torchrun through the process runner, with
`python -m workers.stage_main` as each rank's program. torchrun closes inherited file descriptors, so the
ranks cannot write to the worker's event pipe: they write their events to a FIFO in the job's work dir,
and this process forwards rank 0's progress, metrics and artifacts and turns the ranks' result, or the
error that explains their failure, into its own.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any

from contract.params.common import DataParallelParams, StageParams
from contract.reasons import TerminationReason
from drafting.context import EventSink, StageCancelled, StageContext, StageError
from drafting.ml.distributed import Ranks
from drafting.proc import StartedProcess, run_command, signal_children

# Ranks asked to stop finish their step and save the training state; past this, torchrun's group is ended.
RANK_STOP_GRACE_S = 60.0
_CHUNK = 1 << 16
# Reasons that may only echo a peer that failed first (a broken collective, the teardown that followed);
# any other reason names the failure itself.
_ECHO_REASONS = {TerminationReason.STAGE_ERROR, TerminationReason.USER_CANCELLED}


def world_size(ctx: StageContext, params: DataParallelParams) -> int:
    """Ranks to run: one per leased GPU on cuda, `ranks` gloo processes on cpu."""
    if params.device == "cpu":
        return params.ranks or 1
    if params.ranks is not None and ctx.gpus and params.ranks != len(ctx.gpus):
        raise StageError(
            f"ranks is {params.ranks} but the job holds {len(ctx.gpus)} GPU(s): on cuda a rank uses one GPU"
        )
    return len(ctx.gpus) or 1


class _QuietContext(StageContext):
    """A rank other than 0: same paths, GPUs and cancel, but rank 0 alone logs and reports."""

    def log(self, text: str, *, stream: str = "stdout") -> None:
        pass

    def progress(self, fraction: float, message: str = "") -> None:
        pass

    def metric(self, name: str, value: float, step: int) -> None:
        pass

    def artifact(self, kind: str, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        pass


def quiet_unless_main(ctx: StageContext, ranks: Ranks) -> StageContext:
    if ranks.is_main:
        return ctx
    return _QuietContext(**{f.name: getattr(ctx, f.name) for f in fields(ctx)})


def run_ranks(ctx: StageContext, kind: str, params: StageParams, world: int) -> dict[str, Any]:
    """Run stage `kind` as `world` torchrun ranks on this host; returns rank 0's result."""
    folder = ctx.work_dir / "ranks"
    folder.mkdir(parents=True, exist_ok=True)
    params_file = folder / "params.json"
    params_file.write_text(params.model_dump_json())
    fifo = folder / "events"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo, 0o600)
    events = RankEvents(fifo, ctx.sink)
    stopper = _RankStopper(ctx.cancel)
    ctx.log(f"[eyas] starting {world} ranks with torchrun")
    try:
        outcome = run_command(
            torchrun_argv(ctx, kind, params_file, fifo, world),
            on_line=lambda stream, text: ctx.log(text, stream=stream),
            on_start=stopper.watch,
            cancel=stopper.give_up,
            grace_s=RANK_STOP_GRACE_S,
        )
    finally:
        stopper.close()
        events.close()
        fifo.unlink(missing_ok=True)
    if ctx.cancel.is_set():
        raise StageCancelled()
    error = events.root_error()
    if error is not None:
        raise StageError(
            str(error.get("message") or "a rank failed"),
            reason=TerminationReason(error.get("reason", TerminationReason.STAGE_ERROR)),
            details={**(error.get("details") or {}), "rank": error.get("rank")},
        )
    if outcome.exit_code == 0 and events.result is not None:
        return events.result
    raise StageError(f"torchrun exited with code {outcome.exit_code} and no rank said why: see the log")


def torchrun_argv(ctx: StageContext, kind: str, params_file: Path, fifo: Path, world: int) -> list[str]:
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
        "--max-restarts=0", "-m", "workers.stage_main", "--kind", kind, "--params-file", str(params_file),
        "--event-fifo", str(fifo), "--work-dir", str(ctx.work_dir), "--gpus", ",".join(map(str, ctx.gpus)),
    ]  # fmt: skip
    argv += [f"--allowed-root={root}" for root in ctx.allowed_roots]
    argv += [f"--data-dir={ctx.data_dir}"] if ctx.data_dir is not None else []
    argv += [f"--inherited-views={ctx.paths.views_folder()}"]  # the params' paths are already pinned
    argv += ["--allow-remote-code"] if ctx.allow_remote_code else []
    return argv + (["--job-id", ctx.job_id] if ctx.job_id else [])


class _RankStopper:
    """On cancel, asks the ranks themselves to stop (SIGTERM: they agree on it at the next step, save the
    state and exit), rather than torchrun, which would answer with a traceback and its own teardown. If
    they are not gone after RANK_STOP_GRACE_S, `give_up` is set and the runner ends torchrun's group."""

    def __init__(self, cancel: threading.Event) -> None:
        self._cancel = cancel
        self._done = threading.Event()
        self.give_up = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, torchrun: StartedProcess) -> None:
        self._thread = threading.Thread(target=self._run, args=(torchrun.pid,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self, torchrun_pid: int) -> None:
        while not self._done.is_set():
            if self._cancel.wait(0.1):
                signal_children(torchrun_pid, signal.SIGTERM)
                if not self._done.wait(RANK_STOP_GRACE_S):
                    self.give_up.set()
                return


class RankEvents:
    """Reads the ranks' event lines from a FIFO on a thread: forwards rank 0's progress, metrics and
    artifacts to the stage's own sink, keeps rank 0's result and every rank's errors.

    The FIFO is opened read-write, so opening never blocks and ranks that come and go never end the
    stream; `close` drains what they wrote before stopping."""

    def __init__(self, fifo: Path, sink: EventSink) -> None:
        self._fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self._sink = sink
        self._closing = threading.Event()
        self._partial = b""
        self.result: dict[str, Any] | None = None
        self.errors: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, name="rank-events", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        self._thread.join()
        os.close(self._fd)

    def root_error(self) -> dict[str, Any] | None:
        """The error that explains the failure: the first one naming a specific reason, else the first."""
        specific = [e for e in self.errors if e.get("reason") not in _ECHO_REASONS]
        candidates = specific or self.errors
        return candidates[0] if candidates else None

    def _read(self) -> None:
        while True:
            readable, _, _ = select.select([self._fd], [], [], 0.1)
            if not readable:
                if self._closing.is_set():
                    return
                continue
            try:
                chunk = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                continue
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                self._handle(line)

    def _handle(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return  # a torn line from a rank killed mid-write carries nothing to act on
        rank = event.pop("rank", None)
        if event.get("type") == "error":
            self.errors.append({**event, "rank": rank})
        elif rank != 0:
            return
        elif event.get("type") == "result":
            self.result = event.get("result")
        else:
            self._sink.emit(event)
