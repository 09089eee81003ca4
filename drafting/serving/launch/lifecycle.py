"""Check, start, watch and stop a server from inside a stage (the launch stage and the benchmark sweep).

The server's output is printed through as the job's log; its state changes are `server` events:
{"type": "server", "state": starting|ready|failed|stopping|stopped, "url", "argv", "pid", "engine", "gpus",
"draft", "accept_len", …}.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.context import StageCancelled, StageContext, StageError, remote_code
from drafting.serving.launch.checks import prepare_launch
from drafting.serving.launch.render import HostFacts, RenderedLaunch
from drafting.serving.launch.server_process import ServerDied, ServerNotReady, ServerProcess
from drafting.serving.launch.sglang_parser import installed_sglang_version

ENV_PROGRAM = "/usr/bin/env"
_QUOTED_LINES = 40
_ACCEPT_EVENT_INTERVAL_S = 2.0


def host_facts(gpus: Sequence[int]) -> HostFacts:
    return HostFacts(
        python=sys.executable, sglang_version=installed_sglang_version(), gpu_count=len(gpus), on_host=True
    )


def checked_launch(ctx: StageContext, params: LaunchParams) -> RenderedLaunch:
    """Render and check on this host; log every finding; raise LAUNCH_CHECK_FAILED on any error. (The
    worker and stage_main have already held every path, nested ones too, against the allowed roots.)
    trust_remote_code is refused first where the host does not allow it (REMOTE_CODE_NOT_ALLOWED)."""
    remote_code(ctx, params.trust_remote_code)
    rendered = prepare_launch(params, host=host_facts(ctx.gpus), gpus=ctx.gpus)
    for finding in rendered.findings:
        ctx.log(f"launch check {finding}")
    ctx.sink.emit({"type": "launch_checks", **rendered.as_dict()})
    if rendered.errors:
        listed = "; ".join(f"{f.code}: {f.message}" for f in rendered.errors)
        raise StageError(
            f"launch refused before starting anything: {listed}",
            reason=TerminationReason.LAUNCH_CHECK_FAILED,
            details=rendered.as_dict(),
        )
    return rendered


@dataclass
class ServerEvents:
    """Emits `server` events with the fields every state shares."""

    ctx: StageContext
    rendered: RenderedLaunch
    params: LaunchParams
    pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def emit(self, state: str, **fields: Any) -> None:
        shape = self.rendered.shape
        event = {
            "type": "server",
            "state": state,
            "engine": self.rendered.engine,
            "url": self.rendered.url,
            "argv": self.rendered.argv,
            "pid": self.pid,
            "gpus": list(self.ctx.gpus),
            "draft": self.params.draft,
            "depth": shape.num_steps if shape else None,
            "config": f"{shape.num_steps},{shape.eagle_topk},{shape.num_draft_tokens}" if shape else None,
            "cuda_graphs": self.rendered.cuda_graphs.get("enabled"),
            **self.extra,
            **fields,
        }
        self.ctx.sink.emit(event)


@dataclass
class LiveServer:
    process: ServerProcess
    rendered: RenderedLaunch
    events: ServerEvents
    ready_after_s: float

    @property
    def url(self) -> str:
        return self.rendered.url


def launch_argv(rendered: RenderedLaunch, gpus: Sequence[int]) -> list[str]:
    """The server's argv behind `env NAME=VALUE …`: it inherits the worker's environment (PATH, PYTHONPATH),
    gets the spec's allow-listed variables, and sees only the GPUs of the job's lease."""
    assignments = {**rendered.env, "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus)}
    return [ENV_PROGRAM, *(f"{name}={value}" for name, value in assignments.items()), *rendered.argv]


@contextmanager
def launched_server(
    ctx: StageContext, params: LaunchParams, rendered: RenderedLaunch
) -> Iterator[LiveServer]:
    """Start the server, wait until /health_generate says 200, yield it, and always stop it."""
    process = ServerProcess(
        launch_argv(rendered, ctx.gpus),
        rendered.url,
        on_line=lambda stream, text: ctx.log(text, stream=stream),
        grace_s=params.stop_grace_s,
    )
    events = ServerEvents(ctx, rendered, params)
    process.start()
    events.pid = process.pid
    events.emit("starting")
    ready_after = _wait_ready(ctx, params, process, events)
    events.emit("ready", ready_after_s=round(ready_after, 2))
    try:
        yield LiveServer(process, rendered, events, ready_after)
    finally:
        events.emit("stopping")
        result = process.stop()
        events.emit(
            "stopped", exit_code=result.exit_code if result else None, accept_len=process.log.accept_len
        )


def _wait_ready(
    ctx: StageContext, params: LaunchParams, process: ServerProcess, events: ServerEvents
) -> float:
    try:
        waited = process.wait_ready(timeout_s=params.ready_timeout_s, cancel=ctx.cancel)
    except ServerDied as died:
        process.stop()
        raise _died(events, died, before_ready=True) from died
    except ServerNotReady as late:
        process.stop()
        lines = process.log.tail(_QUOTED_LINES)
        events.emit("failed", reason="not_ready", log_lines=lines)
        raise StageError(
            f"{late}; last lines:\n" + "\n".join(lines),
            reason=TerminationReason.TIMEOUT,
            details={"log": lines},
        ) from late
    if ctx.cancel.is_set():
        process.stop()
        events.emit("stopped", reason="cancelled before ready")
        raise StageCancelled()
    return waited


def _died(events: ServerEvents, died: ServerDied, *, before_ready: bool) -> StageError:
    lines = died.lines[-_QUOTED_LINES:]
    when = "during start-up" if before_ready else "while serving"
    events.emit("failed", reason=died.pattern or "exited", exit_code=died.exit_code, log_lines=lines)
    return StageError(
        f"server died {when}: {died}\n" + "\n".join(lines),
        reason=TerminationReason.SERVER_DIED,
        details={
            "log": lines,
            "exit_code": died.exit_code,
            "pattern": died.pattern,
            "argv": events.rendered.argv,
        },
    )


def raise_if_died(server: LiveServer) -> None:
    """A StageError (SERVER_DIED, with the log lines that explain it) if the server has exited."""
    try:
        server.process.raise_if_dead()
    except ServerDied as died:
        raise _died(server.events, died, before_ready=False) from died


def serve_until_cancelled(ctx: StageContext, server: LiveServer) -> None:
    """Keep the server up until a stop (ctx.cancel); report acceptance from its log; fail if it dies."""
    last_reported: float | None = None
    last_emit = 0.0
    while not ctx.cancel.wait(0.25):
        raise_if_died(server)
        accept_len = server.process.log.accept_len
        now = time.monotonic()
        if (
            accept_len is not None
            and accept_len != last_reported
            and now - last_emit >= _ACCEPT_EVENT_INTERVAL_S
        ):
            server.events.emit(
                "ready", accept_len=accept_len, gen_throughput=server.process.log.gen_throughput
            )
            last_reported, last_emit = accept_len, now
