"""Run the draft doctor (drafting.checkpoint.diagnose, another part of eyas); its report becomes findings."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from drafting.serving.findings import Finding, Severity, info, warning


def run_draft_doctor(draft: str, *, target: str, algorithm: str | None, sglang_version: str) -> list[Finding]:
    try:
        diagnose = importlib.import_module("drafting.checkpoint").diagnose
    except (ImportError, AttributeError):
        message = (
            "the draft doctor (drafting.checkpoint) is not part of this build: tensors and config not checked"
        )
        return [info("DOCTOR_SKIPPED", message, "run a doctor job on the draft")]
    try:
        report = diagnose(
            Path(draft), target=Path(target), algorithm=algorithm or "EAGLE3", sglang_version=sglang_version
        )
    except Exception as exc:  # noqa: BLE001 - the doctor failing must not hide the other findings
        return [
            warning(
                "DOCTOR_CRASHED", f"the draft doctor failed: {type(exc).__name__}: {exc}", "run a doctor job"
            )
        ]
    return [_as_finding(item) for item in _items(report)]


def _items(report: Any) -> Iterable[Any]:
    if isinstance(report, dict):
        listed: Iterable[Any] = report.get("findings", [])
        return listed
    findings: Iterable[Any] | None = getattr(report, "findings", None)
    return findings if findings is not None else report


def _field(item: Any, name: str) -> str:
    value = item.get(name) if isinstance(item, dict) else getattr(item, name, "")
    return "" if value is None else str(getattr(value, "value", value))


def _as_finding(item: Any) -> Finding:
    severity = _field(item, "severity").lower()
    known = {s.value: s for s in Severity}
    return Finding(
        code=_field(item, "code") or "DOCTOR",
        severity=known.get(severity, Severity.WARNING),
        message=f"draft doctor: {_field(item, 'message')}",
        fix=_field(item, "fix"),
    )
