"""Watches a server's log: fatal patterns, the last acceptance length, the lines that explain a death."""

from __future__ import annotations

import re
import threading
from collections import deque
from dataclasses import dataclass

from drafting import sglang_facts as rules

_CONTEXT_BEFORE = 3
_CONTEXT_AFTER = 40
# The closing line of a Python traceback ("RuntimeError: expected mat1 and mat2 …"): it names the cause, and
# SGLang's tracebacks (a CUDA-graph capture, a scheduler loop) are often longer than the quoted context.
_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?(?:[A-Za-z_]\w*)?(?:Error|Exception)(?::\s.*)?$")


@dataclass(frozen=True)
class FatalLine:
    pattern: rules.FatalPattern
    line: str
    index: int  # position of the line in the whole log


class ServerLog:
    """Fed line by line from the process runner's reader threads (hence the lock)."""

    def __init__(self, keep_lines: int = 400) -> None:
        self._lines: deque[tuple[int, str]] = deque(maxlen=keep_lines)
        self._lock = threading.Lock()
        self._count = 0
        self.fatal: FatalLine | None = None
        self.accept_len: float | None = None
        self.gen_throughput: float | None = None
        self.saw_ready_line = False

    def feed(self, line: str) -> None:
        with self._lock:
            self._lines.append((self._count, line))
            if self.fatal is None:
                self.fatal = _match_fatal(line, self._count)
            self._count += 1
        self._read_stats(line)

    def _read_stats(self, line: str) -> None:
        accept = rules.ACCEPT_LEN.search(line)
        if accept:
            self.accept_len = float(accept.group(1))
        throughput = rules.GEN_THROUGHPUT.search(line)
        if throughput:
            self.gen_throughput = float(throughput.group(1))
        if rules.READY_LINE in line:
            self.saw_ready_line = True

    def tail(self, count: int = 30) -> list[str]:
        with self._lock:
            return [text for _, text in list(self._lines)[-count:]]

    def explaining_lines(self) -> list[str]:
        """Around the first fatal line if there is one (tracebacks follow it), else the last lines; the
        exception line that closes the traceback always comes last, even beyond that context."""
        with self._lock:
            if self.fatal is None:
                lines = [text for _, text in list(self._lines)[-30:]]
            else:
                start, stop = self.fatal.index - _CONTEXT_BEFORE, self.fatal.index + _CONTEXT_AFTER
                lines = [text for index, text in self._lines if start <= index <= stop]
        cause = self.cause()
        if cause is not None and (not lines or lines[-1] != cause):
            lines.append(cause)
        return lines

    def cause(self) -> str | None:
        """The last exception line of a traceback logged at or after the first fatal line (any, if none)."""
        with self._lock:
            first = self.fatal.index if self.fatal is not None else -1
            found = [text for index, text in self._lines if index >= first and _EXCEPTION_LINE.match(text)]
        return found[-1].strip() if found else None


def _match_fatal(line: str, index: int) -> FatalLine | None:
    for pattern in rules.FATAL_LOG_PATTERNS:
        if pattern.regex.search(line):
            return FatalLine(pattern, line, index)
    return None
