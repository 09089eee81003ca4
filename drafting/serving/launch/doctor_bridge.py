"""Run the draft doctor (drafting.checkpoint.diagnose) for a launch: its findings join the launch's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from drafting.checkpoint import diagnose
from drafting.findings import Finding, warning


def run_draft_doctor(draft: str, *, target: str, algorithm: str | None, sglang_version: str) -> list[Finding]:
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
    return [replace(finding, message=f"draft doctor: {finding.message}") for finding in report.findings]
