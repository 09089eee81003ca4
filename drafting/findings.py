"""Findings: what a check tells the user (the draft doctor, the converter, a launch's checks), each with a
stable code, a one-line explanation and the fix. One type for all of them, so a launch can carry the
doctor's findings as they are, and each serializes to the same keys wherever it is stored."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

_SHOWN_SUBJECTS = 4


class Severity(StrEnum):
    ERROR = "error"  # SGLang would fail to start, or would serve wrong or random weights: nothing starts
    WARNING = "warning"  # it works, but costs something, needs a launch flag, or is not what the user wants
    INFO = "info"  # a fact, a decision eyas made, or a check it skipped, and why


_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class Finding:
    """One problem (or fact): stable code, one-line explanation, and the fix."""

    severity: Severity
    code: str
    message: str
    fix: str = ""
    subjects: tuple[str, ...] = ()  # tensor or file names the finding is about

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity.value,
            "code": self.code,
            "message": self.message,
            "fix": self.fix,
            "subjects": list(self.subjects),
        }

    def render(self) -> str:
        """The finding as the doctor's text report shows it: severity, code and message, then the fix."""
        line = f"{self.severity.value.upper():7} {self.code}: {self.message}"
        if self.subjects:
            shown = ", ".join(self.subjects[:_SHOWN_SUBJECTS])
            more = len(self.subjects) - _SHOWN_SUBJECTS
            line += f" [{shown}{f', … +{more} more' if more > 0 else ''}]"
        if self.fix:
            line += f"\n        fix: {self.fix}"
        return line

    def __str__(self) -> str:
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"[{self.severity}] {self.code}: {self.message}{fix}"


def error(code: str, message: str, fix: str = "") -> Finding:
    return Finding(Severity.ERROR, code, message, fix)


def warning(code: str, message: str, fix: str = "") -> Finding:
    return Finding(Severity.WARNING, code, message, fix)


def info(code: str, message: str, fix: str = "") -> Finding:
    return Finding(Severity.INFO, code, message, fix)


def errors_in(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then notes; each in the order found."""
    return sorted(findings, key=lambda f: _ORDER[f.severity])
