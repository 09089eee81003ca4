"""selftest: prints lines, sleeps and exits with a chosen code. Used by smoke tests and the walkthrough."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract.params.selftest import SelftestParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.userfiles import append_user_text


def run(ctx: StageContext, params: SelftestParams) -> dict[str, Any]:
    if params.marker_file:
        append_user_text(
            Path(params.marker_file), f"{ctx.job_id} {datetime.now(UTC).isoformat()}\n", "marker file"
        )
    interval = 1.0 / params.lines_per_second if params.lines_per_second else 0.0
    _print_lines(ctx, params, interval)
    deadline = time.monotonic() + params.sleep_s
    while time.monotonic() < deadline:
        ctx.check_cancelled()
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    ctx.progress(1.0, "done")
    if params.exit_code:
        raise StageError(
            f"selftest asked to exit with {params.exit_code}",
            reason=TerminationReason.NONZERO_EXIT,
            exit_code=params.exit_code,
        )
    return {"lines": params.lines, "stderr_lines": params.stderr_lines}


def _print_lines(ctx: StageContext, params: SelftestParams, interval: float) -> None:
    out = sys.stdout
    started = time.monotonic()
    for i in range(params.lines):
        text = f"line {i} {time.time():.6f}" if params.stamp else f"line {i}"
        if params.line_bytes > len(text):
            text = text + " " + "x" * (params.line_bytes - len(text) - 1)
        out.write(text + "\n")
        if interval:
            out.flush()
            ctx.check_cancelled()
            wait = started + (i + 1) * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        if params.lines and i % 1000 == 0:
            ctx.progress(i / params.lines, f"{i} lines")
    out.flush()
    for i in range(params.stderr_lines):
        ctx.log(f"err {i}", stream="stderr")
