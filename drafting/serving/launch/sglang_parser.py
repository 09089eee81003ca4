"""SGLang's own argument parser, when sglang is importable: the authority on which flags exist.

Building it imports sglang.srt.server_args (seconds), so it is built lazily, once per process.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import io
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field


class _ParseError(Exception):
    pass


class _ParseExit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _RaisingParser(argparse.ArgumentParser):
    """argparse exits the process on errors, and its help/version actions exit 0 (a launch that "succeeds"
    without serving); a checker must report both instead."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _ParseError(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]  # noqa: ARG002 - argparse's error() signature
        raise _ParseExit(status)


@dataclass(frozen=True)
class ParseOutcome:
    unknown: list[str] = field(default_factory=list)  # flags SGLang does not define
    error: str | None = None  # another argparse error (bad type, bad choice, missing value)
    exit_status: int | None = None  # an action exited (help, version…): the server would never start


_build_lock = threading.Lock()


def installed_sglang_version() -> str | None:
    """The installed sglang's version, read from its metadata without importing it."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _cached_parser() -> argparse.ArgumentParser | None:
    try:
        from sglang.srt.server_args import ServerArgs
    except Exception:  # noqa: BLE001 - any import failure means "no parser here", which is a finding
        return None
    parser = _RaisingParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def sglang_parser() -> argparse.ArgumentParser | None:
    """SGLang's parser (None when sglang cannot be imported here)."""
    with _build_lock:
        return _cached_parser()


def parse_with_sglang(parser: argparse.ArgumentParser, args: Sequence[str]) -> ParseOutcome:
    """Parse server args as `sglang serve` would, without exiting; deprecation notes go nowhere."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            _, rest = parser.parse_known_args(list(args))
        except _ParseError as exc:
            return ParseOutcome(error=str(exc))
        except _ParseExit as exc:
            return ParseOutcome(exit_status=exc.status)
        except SystemExit as exc:  # an action of SGLang's own that calls sys.exit
            return ParseOutcome(exit_status=exc.code if isinstance(exc.code, int) else 1)
    return ParseOutcome(unknown=[arg for arg in rest if arg.startswith("-")])


def canonical_flags(parser: argparse.ArgumentParser | None, flag: str) -> tuple[str, ...]:
    """Every spelling of the option `flag` means, resolving abbreviations as argparse does (() if none)."""
    if parser is None:
        return ()
    options: dict[str, argparse.Action] = parser._option_string_actions  # argparse has no public map
    if flag in options:
        return tuple(options[flag].option_strings)
    matches = {id(action): action for name, action in options.items() if name.startswith(flag)}
    if len(matches) == 1:
        return tuple(next(iter(matches.values())).option_strings)
    return ()
