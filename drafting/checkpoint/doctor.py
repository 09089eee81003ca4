"""The SGLang draft doctor: would this checkpoint load every weight, and run as trained?

It reads config.json and the safetensors headers (plus the small d2t tensor), never the weights, so its
time does not grow with the checkpoint; the first call in a process also imports torch and transformers,
to read the config the way SGLang does (sglang_reading).
"""

from __future__ import annotations

from pathlib import Path

from drafting.checkpoint.config_checks import CONFIG_CHECKS
from drafting.checkpoint.dtype_checks import DTYPE_CHECKS
from drafting.checkpoint.errors import CheckpointError, PickleWeightsError
from drafting.checkpoint.report import DoctorReport
from drafting.checkpoint.source import open_checkpoint
from drafting.checkpoint.target import TargetModel, load_target
from drafting.checkpoint.target_checks import TARGET_CHECKS
from drafting.checkpoint.tensor_checks import TENSOR_CHECKS
from drafting.checkpoint.view import DraftView
from drafting.findings import Finding, Severity
from drafting.sglang_facts import VERIFIED_UP_TO, format_version, is_verified, parse_version, rules_for

DEFAULT_SGLANG_VERSION = "0.5.14"


def diagnose(
    draft: Path,
    *,
    target: Path | None = None,
    algorithm: str = "EAGLE3",
    sglang_version: str = DEFAULT_SGLANG_VERSION,
) -> DoctorReport:
    """Check a draft folder against SGLang's loader (and the target, when given).

    `target` is the target model folder or its config.json. An unreadable draft or target becomes an
    error finding rather than an exception; only a malformed `sglang_version` raises ValueError.
    """
    rules = rules_for(sglang_version)
    version = format_version(parse_version(sglang_version))
    report = DoctorReport(str(draft), version, algorithm.upper(), str(target) if target else None)
    try:
        checkpoint = open_checkpoint(Path(draft))
    except CheckpointError as exc:
        code = "PICKLE_WEIGHTS" if isinstance(exc, PickleWeightsError) else "UNREADABLE"
        fix = "convert with `eyas fix-keys --allow-pickle`" if code == "PICKLE_WEIGHTS" else ""
        report.findings.append(Finding(Severity.ERROR, code, exc.message, fix, _subject(exc)))
        return report
    target_model, target_findings = _load_target(target)
    view = DraftView(
        label=str(draft),
        config=checkpoint.config,
        tensors=checkpoint.tensors,
        rules=rules,
        version=version,
        algorithm=algorithm,
        target=target_model,
        files=[p.name for p in checkpoint.weight_files],
    )
    report.findings += target_findings
    return run_checks(view, report)


def run_checks(view: DraftView, report: DoctorReport | None = None) -> DoctorReport:
    """Every check over an in-memory view (fix_keys runs this on its plan before writing)."""
    if report is None:
        target = str(view.target.config_path) if view.target else None
        report = DoctorReport(view.label, view.version, view.algorithm.upper(), target)
    if not is_verified(view.version):
        report.findings.append(
            Finding(
                Severity.INFO,
                "VERSION_UNVERIFIED",
                f"rules for SGLang {view.version} are assumed from {format_version(VERIFIED_UP_TO)}, "
                "the last release read",
            )
        )
    for check in (*TARGET_CHECKS, *CONFIG_CHECKS, *TENSOR_CHECKS, *DTYPE_CHECKS):
        report.findings.extend(check(view))
    report.summary = {
        "tensors": len(view.tensors),
        "bytes": sum(entry.nbytes for entry in view.tensors.values()),
        "files": view.files,
        "layer_module": view.rules.layer_module,
        "sglang_dtype": view.reading.dtype,
        "sglang_context_length": view.reading.context_length,
        "sglang_reading": view.reading.reader,
    }
    return report


def _load_target(target: Path | None) -> tuple[TargetModel | None, list[Finding]]:
    if target is None:
        note = Finding(
            Severity.INFO,
            "TARGET_NOT_GIVEN",
            "no target given: vocab, rope, context, hidden size and aux-layer ranges were not checked",
            "pass --target with the target model folder or its config.json",
        )
        return None, [note]
    try:
        return load_target(Path(target)), []
    except CheckpointError as exc:
        return None, [Finding(Severity.ERROR, "TARGET_UNREADABLE", exc.message, "", _subject(exc))]


def _subject(exc: CheckpointError) -> tuple[str, ...]:
    return (str(exc.path),) if exc.path else ()
