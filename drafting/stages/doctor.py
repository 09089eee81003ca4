"""doctor: would SGLang load every weight of this drafter, and run it as trained?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.params.checkpoint import DoctorParams
from contract.reasons import TerminationReason
from drafting.checkpoint import diagnose
from drafting.context import StageContext, StageError


def run(ctx: StageContext, params: DoctorParams) -> dict[str, Any]:
    draft = Path(params.draft)
    target = Path(params.target) if params.target else None
    report = diagnose(draft, target=target, algorithm=params.algorithm, sglang_version=params.sglang_version)
    ctx.log(report.render_text())
    ctx.progress(1.0, "checked")
    if not report.ok:
        raise StageError(
            f"{len(report.errors)} error(s): " + ", ".join(sorted({f.code for f in report.errors})),
            reason=TerminationReason.CHECKPOINT_INVALID,
            details=report.to_dict(),
        )
    return report.to_dict()
