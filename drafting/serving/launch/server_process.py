"""A server process under eyas's control: started through drafting.proc in a thread, watched, stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from drafting.proc import CommandNotFound, CommandResult, StartedProcess, run_command
from drafting.serving.launch.server_log import ServerLog

LineSink = Callable[[str, str], None]
# After a fatal line the server usually exits by itself (SGLang kills its tree): wait that long for the rest
# of the traceback before stopping it.
_FATAL_SETTLE_S = 5.0


class ServerDied(Exception):
    """The server exited, or logged a fatal line, before (or after) it was ready."""

    def __init__(self, message: str, *, lines: list[str], exit_code: int | None, pattern: str | None) -> None:
        super().__init__(message)
        self.lines = lines
        self.exit_code = exit_code
        self.pattern = pattern


class ServerNotReady(Exception):
    """The readiness deadline passed with the server still running."""


@dataclass
class ServerProcess:
    argv: Sequence[str]
    url: str
    on_line: LineSink
    grace_s: float = 30.0
    log: ServerLog = field(default_factory=ServerLog)
    started: StartedProcess | None = None
    result: CommandResult | None = None
    start_error: str | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._has_started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="server-process", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._has_started.wait()

    def _run(self) -> None:
        try:
            self.result = run_command(
                self.argv,
                on_line=self._line,
                cancel=self._stop,
                grace_s=self.grace_s,
                on_start=self._mark_started,
                die_with_parent=True,  # a SIGKILLed stage must not leave its server holding the GPUs
            )
        except CommandNotFound as exc:
            self.start_error = str(exc)
        finally:
            self._has_started.set()

    def _mark_started(self, started: StartedProcess) -> None:
        self.started = started
        self._has_started.set()

    def _line(self, stream: str, text: str) -> None:
        self.log.feed(text)
        self.on_line(stream, text)

    @property
    def pid(self) -> int | None:
        return self.started.pid if self.started else None

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self.start_error is None

    def raise_if_dead(self) -> None:
        """ServerDied when the process is gone or a fatal line was logged (then it is stopped first)."""
        if self.start_error is not None:
            raise ServerDied(self.start_error, lines=[], exit_code=None, pattern="not_started")
        if self.log.fatal is not None:
            self._thread.join(timeout=_FATAL_SETTLE_S)
            self.stop()
            fatal = self.log.fatal
            hint = f" ({fatal.pattern.hint})" if fatal.pattern.hint else ""
            message = f"server logged a fatal line [{fatal.pattern.name}]{hint}: {fatal.line.strip()}"
            cause = self.log.cause()
            message += f" — {cause}" if cause and cause not in fatal.line else ""
            raise ServerDied(
                message,
                lines=self.log.explaining_lines(),
                exit_code=self._exit_code(),
                pattern=fatal.pattern.name,
            )
        if not self._thread.is_alive():
            code = self._exit_code()
            cause = self.log.cause()
            message = f"server exited with code {code}" + (f": {cause}" if cause else "")
            raise ServerDied(message, lines=self.log.explaining_lines(), exit_code=code, pattern=None)

    def _exit_code(self) -> int | None:
        return self.result.exit_code if self.result else None

    def wait_ready(self, *, timeout_s: float, cancel: threading.Event, poll_s: float = 1.0) -> float:
        """Poll /health_generate until 200; returns seconds waited. Raises ServerDied or ServerNotReady."""
        started_at = time.monotonic()
        deadline = started_at + timeout_s
        with httpx.Client(timeout=httpx.Timeout(30.0, connect=2.0)) as client:
            while True:
                self.raise_if_dead()
                if cancel.is_set():
                    return time.monotonic() - started_at
                if _healthy(client, self.url):
                    return time.monotonic() - started_at
                if time.monotonic() >= deadline:
                    raise ServerNotReady(f"/health_generate did not answer 200 within {timeout_s:.0f} s")
                cancel.wait(min(poll_s, max(0.0, deadline - time.monotonic())))

    def stop(self) -> CommandResult | None:
        """SIGTERM the group, SIGKILL after the grace period (drafting.proc), wait for the readers."""
        self._stop.set()
        self._thread.join()
        return self.result


def _healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(f"{url}/health_generate").status_code == 200
    except httpx.HTTPError:
        return False
