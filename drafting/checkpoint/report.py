"""What the doctor and the converter tell the user: findings with stable codes, and the reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

_SHOWN_SUBJECTS = 4


class Severity(StrEnum):
    ERROR = "error"  # SGLang would fail to start, or would serve wrong or random weights
    WARNING = "warning"  # works, but costs something or needs a launch flag
    INFO = "info"


_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class Finding:
    """One problem (or fact) about a draft: stable code, one-line explanation, and the fix."""

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
        line = f"{self.severity.value.upper():7} {self.code}: {self.message}"
        if self.subjects:
            shown = ", ".join(self.subjects[:_SHOWN_SUBJECTS])
            more = len(self.subjects) - _SHOWN_SUBJECTS
            line += f" [{shown}{f', … +{more} more' if more > 0 else ''}]"
        if self.fix:
            line += f"\n        fix: {self.fix}"
        return line


@dataclass
class DoctorReport:
    """Every finding about one draft, checked against one SGLang release (and a target, if given)."""

    draft: str
    sglang_version: str
    algorithm: str
    target: str | None
    findings: list[Finding] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    def codes(self, severity: Severity | None = None) -> set[str]:
        return {f.code for f in self.findings if severity is None or f.severity is severity}

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: _ORDER[f.severity])

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "draft": self.draft,
            "sglang_version": self.sglang_version,
            "algorithm": self.algorithm,
            "target": self.target,
            "summary": self.summary,
            "findings": [f.to_dict() for f in self.sorted_findings()],
        }

    def render_text(self) -> str:
        counts = {s: sum(f.severity is s for f in self.findings) for s in Severity}
        verdict = "OK" if self.ok else "NOT LOADABLE AS IS"
        lines = [
            f"draft {self.draft} for SGLang {self.sglang_version} ({self.algorithm})"
            + (f", target {self.target}" if self.target else ", no target given"),
            f"{verdict}: {counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), "
            f"{counts[Severity.INFO]} note(s)",
        ]
        lines += [f.render() for f in self.sorted_findings()]
        return "\n".join(lines)


@dataclass(frozen=True)
class TensorMove:
    """What happened to one source tensor."""

    source: str
    action: str  # "kept" | "renamed" | "dropped"
    dest: str | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "action": self.action, "dest": self.dest, "reason": self.reason}


@dataclass
class FixReport:
    """The outcome of fix_checkpoint: every tensor's fate, the config changes and the doctor's verdict."""

    source: str
    dest: str
    sglang_version: str
    written: bool
    moves: list[TensorMove] = field(default_factory=list)
    config_changes: list[str] = field(default_factory=list)
    doctor: DoctorReport | None = None
    files: list[str] = field(default_factory=list)
    bytes_written: int = 0

    @property
    def ok(self) -> bool:
        return self.written and self.doctor is not None and self.doctor.ok

    def of_action(self, action: str) -> list[TensorMove]:
        return [m for m in self.moves if m.action == action]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "written": self.written,
            "source": self.source,
            "dest": self.dest,
            "sglang_version": self.sglang_version,
            "renamed": [m.to_dict() for m in self.of_action("renamed")],
            "dropped": [m.to_dict() for m in self.of_action("dropped")],
            "kept": [m.to_dict() for m in self.of_action("kept")],
            "config_changes": self.config_changes,
            "files": self.files,
            "bytes_written": self.bytes_written,
            "doctor": self.doctor.to_dict() if self.doctor else None,
        }

    def render_text(self) -> str:
        head = f"wrote {self.dest}" if self.written else f"REFUSED: nothing written to {self.dest}"
        lines = [f"{head} (from {self.source}, for SGLang {self.sglang_version})"]
        for action in ("renamed", "dropped", "kept"):
            moves = self.of_action(action)
            lines.append(f"{action} ({len(moves)}):")
            lines += [f"  {_render_move(m)}" for m in moves]
        if self.config_changes:
            lines.append("config:")
            lines += [f"  {change}" for change in self.config_changes]
        if self.doctor is not None:
            lines.append(self.doctor.render_text())
        return "\n".join(lines)


def _render_move(move: TensorMove) -> str:
    if move.action == "renamed":
        return f"{move.source} -> {move.dest}"
    return f"{move.source}" + (f" ({move.reason})" if move.reason else "")
