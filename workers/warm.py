"""Stage processes started ahead of their jobs: the worker keeps spares (SPARES), imports done, waiting.

Starting `python -m workers.stage_main` costs an interpreter and its imports (0.2-0.5 s here, ~0.2 s of it
CPU): on a loaded host that was the largest part of submit → running. A spare pays it before the job exists.
Each job still gets a process of its own, never reused: a spare becomes that job's process (its own process
group, its output the job's log, its timeout and cancel, all through drafting.proc), and a new spare is
started once the job is recorded running, off that path.

A spare left waiting reads end-of-file when its worker exits (even when killed), and exits: nothing to
clean up on restart, and no process group recorded for a job is ever an idle spare's.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from drafting import proc
from workers import handoff

logger = logging.getLogger("eyas.warm")

# How long a process may take to accept its job: a spare answers at once; one started for the job answers
# after its imports (seconds on a loaded host). Past it, the process is given up.
ACCEPT_TIMEOUT_S = 60.0
# A spare needs 0.2-0.7 s (its imports, on a busy host) before it can take a job; a job that finds none ready
# waits for one. Measured with back-to-back jobs on a shared 2-core machine (a new job every ~0.35 s): with
# two spares 1 job in 6 waited, with three none did. An idle spare holds ~30 MiB.
SPARES = 3


@dataclass(frozen=True)
class Accepted:
    """A stage process that took its job on; `supervise` it (its timeout counts from then). `waited`: the job
    waited for an interpreter's start-up (no spare was ready), which is most of a slow dispatch."""

    process: proc.Unsupervised
    waited: bool


@dataclass(frozen=True)
class NotAccepted:
    """No process took the job (the one started for it died or hung): it was ended; its output explains."""

    process: proc.Unsupervised
    message: str


@dataclass
class _Waiting:
    process: proc.Unsupervised
    sock: socket.socket  # the worker's end of the job socket
    env: dict[str, str]

    def end(self) -> None:
        """End the process; its output stays in its pipes for whoever supervises it next."""
        self.sock.close()
        proc.terminate_group(self.process.started.pgid, grace_s=1.0, popen=self.process.popen)

    def give_up(self) -> str:
        """End the process and read what it wrote (an import error, say): its exit and last lines."""
        self.end()
        lines: list[str] = []
        proc.supervise(self.process, on_line=lambda _stream, text: lines.append(text))
        return f"exit {self.process.popen.returncode}: " + "\n".join(lines[-30:])


class StageProcesses:
    """Starts stage processes, keeping `spares` of them waiting. `env` and `cwd` are a spare's until it has a
    job."""

    def __init__(self, env: dict[str, str], cwd: Path, *, spares: int = SPARES) -> None:
        self._env, self._cwd, self._wanted = env, cwd, spares
        self._changed = threading.Condition()
        self._spares: deque[_Waiting] = deque()
        self._spawning = 0
        self._closed = False

    def take(self, job: handoff.StageJob, event_fd: int) -> Accepted | NotAccepted:
        """A process that accepted `job`: a spare if one takes it, else one started now.

        A spare serves jobs whose environment is the one it was started with: every job that holds no GPU.
        A GPU job's CUDA_VISIBLE_DEVICES names its leased GPUs, so its process starts with it, for it.
        Raises proc.CommandNotFound when no process can be started at all."""
        while job.env == self._env and (spare := self._pop()) is not None:
            if spare.process.popen.poll() is None:
                ready = handoff.is_ready(spare.sock)
                if handoff.send(spare.sock, job, event_fd, timeout_s=ACCEPT_TIMEOUT_S):
                    spare.sock.close()
                    return Accepted(spare.process, waited=not ready)
            output = spare.give_up()
            if spare.process.popen.returncode != -signal.SIGTERM:  # it ended before we ended it: it failed
                logger.warning("a spare stage process did not take its job: %s", output)
        fresh = self._start(job.env)
        if handoff.send(fresh.sock, job, event_fd, timeout_s=ACCEPT_TIMEOUT_S):
            fresh.sock.close()
            return Accepted(fresh.process, waited=True)
        fresh.end()  # its output (why it failed) goes to the job's log
        exit_code = fresh.process.popen.returncode
        return NotAccepted(
            fresh.process, f"the stage process did not take its job (it exited with {exit_code}); see the log"
        )

    def refill(self) -> None:
        """Start spares up to the number wanted, in the background (the caller goes on at once)."""
        with self._changed:
            missing = 0 if self._closed else self._wanted - len(self._spares) - self._spawning
            self._spawning += max(0, missing)
        for _ in range(missing):
            threading.Thread(target=self._spawn, name="eyas-spare-stage", daemon=True).start()

    def close(self) -> None:
        """End the spares (their worker is stopping)."""
        with self._changed:
            self._closed = True
            spares, self._spares = list(self._spares), deque()
        for spare in spares:
            spare.give_up()

    def _pop(self) -> _Waiting | None:
        """The oldest spare (the likeliest to be ready); waits for one being spawned (a few ms) if none."""
        with self._changed:
            self._changed.wait_for(lambda: self._spares or not self._spawning)
            return self._spares.popleft() if self._spares else None

    def _spawn(self) -> None:
        spare: _Waiting | None = None
        try:
            spare = self._start(self._env)
        except Exception:  # no spare means a job starts its own process; the log says why
            logger.exception("could not start a spare stage process")
        finally:
            with self._changed:
                self._spawning -= 1
                if spare is not None and not self._closed:
                    self._spares.append(spare)
                    spare = None
                self._changed.notify_all()
        if spare is not None:  # closed meanwhile
            spare.give_up()

    def _start(self, env: dict[str, str]) -> _Waiting:
        ours, theirs = handoff.socket_pair()
        try:
            process = proc.start(
                [sys.executable, "-m", "workers.stage_main", "--job-socket", str(theirs.fileno())],
                env=env,
                cwd=self._cwd,
                extra_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the process holds its own copy: ours sees EOF when it exits
        return _Waiting(process, ours, dict(env))
