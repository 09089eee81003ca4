"""What the doctor and the converter tell the user: their reports, made of findings (drafting/findings.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drafting.findings import Finding, Severity, by_severity, errors_in


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
        return errors_in(self.findings)

    def codes(self, severity: Severity | None = None) -> set[str]:
        return {f.code for f in self.findings if severity is None or f.severity is severity}

    def sorted_findings(self) -> list[Finding]:
        return by_severity(self.findings)

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
