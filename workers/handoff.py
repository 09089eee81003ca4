"""How a job reaches a stage process that was started before it: one message on a Unix socket pair.

The worker starts `python -m workers.stage_main --job-socket FD` ahead of time (workers/warm.py); the process
does its imports, says `READY` and blocks reading FD. A job is one SOCK_SEQPACKET message — the stage's
arguments and its folder as JSON, with the job's event pipe passed along (SCM_RIGHTS) — and the process
answers `ACCEPTED` once it has taken them on. That answer is what makes the job `running`: a process that
died while it waited never answers, and the job goes to a freshly started one instead. Its environment is
the one it was started with: the worker hands a waiting process only jobs whose environment is that one.

Standard library only: the stage process imports this before it knows its job, so it must stay light.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass

READY = b"ready"
ACCEPTED = b"accepted"
_MAX_MESSAGE = 1 << 18  # the params travel in a file; the message holds arguments and a path
_MAX_REPLY = 64


@dataclass(frozen=True)
class StageJob:
    """What a waiting stage process needs to become one job's process."""

    args: list[str]  # workers.stage_main's arguments, without --event-fd (the passed descriptor's number)
    env: dict[str, str]  # what it must have been started with
    cwd: str


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(the worker's end, the stage process's end); only the stage's end is passed to it."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def is_ready(sock: socket.socket) -> bool:
    """Whether the process at the other end said READY (its imports are done), without waiting."""
    try:
        return sock.recv(_MAX_REPLY, socket.MSG_PEEK | socket.MSG_DONTWAIT) == READY
    except OSError:  # nothing yet (BlockingIOError), or a reset
        return False


def send(sock: socket.socket, job: StageJob, event_fd: int, *, timeout_s: float) -> bool:
    """Hand `job` to the process at the other end and wait up to `timeout_s` for it to accept; False when it
    did not (it died, or closed its end). Its READY is read here too if nobody waited for it: the message
    waits in the socket until the process reads it."""
    message = json.dumps({"args": job.args, "cwd": job.cwd}).encode()
    sock.settimeout(timeout_s)
    try:
        socket.send_fds(sock, [message], [event_fd])
        reply = sock.recv(_MAX_REPLY)
        if reply == READY:
            reply = sock.recv(_MAX_REPLY)
        return reply == ACCEPTED
    except OSError:  # a broken pipe, a reset, a timeout: the process is not taking jobs
        return False


def receive(fd: int) -> tuple[list[str], int] | None:
    """The stage process's side: wait for a job, move into its folder, accept it; returns its arguments and
    its event pipe, or None when the worker closed its end first (it stopped)."""
    sock = socket.socket(fileno=fd)
    try:
        sock.sendall(READY)
        message, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 1)
    except OSError:  # the worker is gone
        message, fds = b"", []
    if not message or not fds:
        sock.close()
        return None
    raw = json.loads(message)
    args, cwd = [str(a) for a in raw["args"]], str(raw["cwd"])
    os.chdir(cwd)
    sock.sendall(ACCEPTED)
    sock.close()
    return args, fds[0]
