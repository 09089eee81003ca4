"""fix_keys: convert a drafter into the layout every SGLang 0.5.x loads, checked by the doctor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.params.checkpoint import FixKeysParams
from contract.reasons import TerminationReason
from drafting.checkpoint import CheckpointError, fix_checkpoint
from drafting.checkpoint.errors import DestinationNotOurs
from drafting.context import StageContext, StageError
from drafting.outputs import OutputMark

_PROGRESS_STEP = 0.02  # report at most every 2 % of the bytes


def run(ctx: StageContext, params: FixKeysParams) -> dict[str, Any]:
    source, dest = Path(params.source), Path(params.dest)
    target = Path(params.target_config) if params.target_config else None
    last = -1.0

    def on_progress(done: int, total: int, name: str) -> None:
        nonlocal last
        ctx.check_cancelled()  # raising here removes the half-built folder
        fraction = done / total if total else 1.0
        if fraction - last >= _PROGRESS_STEP or done == total:
            last = fraction
            ctx.progress(fraction, f"copied {name}")

    try:
        report = fix_checkpoint(
            source,
            dest,
            target=target,
            sglang_version=params.sglang_version,
            force=params.force,
            allow_pickle=params.allow_pickle,
            on_progress=on_progress,
            mark=OutputMark("fix_keys", ctx.job_id),
        )
    except DestinationNotOurs as exc:  # a user's folder (or a link, a file) at dest: never replaced
        raise StageError(
            exc.message, reason=TerminationReason.BAD_INPUT, details={"path": str(dest)}
        ) from exc
    except CheckpointError as exc:
        raise StageError(exc.message, reason=TerminationReason.CHECKPOINT_INVALID) from exc
    ctx.log(report.render_text())
    if not report.ok:
        codes = sorted({f.code for f in report.doctor.errors}) if report.doctor else []
        raise StageError(
            f"refused: the converted draft would not load cleanly ({', '.join(codes)}); nothing written",
            reason=TerminationReason.CHECKPOINT_INVALID,
            details=report.to_dict(),
        )
    ctx.artifact(
        "sglang_checkpoint",
        dest,
        {"source": str(source), "sglang_version": report.sglang_version, "bytes": report.bytes_written},
    )
    return report.to_dict()
