"""Findings: what a launch check reports, each with a stable code and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"  # the launch would fail or serve garbage: it does not start
    WARNING = "warning"  # it starts, but something is probably not what the user wants
    INFO = "info"  # a decision eyas made, or a check it skipped, and why


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}

    def __str__(self) -> str:
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"[{self.severity}] {self.code}: {self.message}{fix}"


def error(code: str, message: str, fix: str = "") -> Finding:
    return Finding(code, Severity.ERROR, message, fix)


def warning(code: str, message: str, fix: str = "") -> Finding:
    return Finding(code, Severity.WARNING, message, fix)


def info(code: str, message: str, fix: str = "") -> Finding:
    return Finding(code, Severity.INFO, message, fix)


def errors_in(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]
