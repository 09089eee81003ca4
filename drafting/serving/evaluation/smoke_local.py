"""The load smoke test outside a job: `eyas doctor DRAFT --target T --serve` and bench scripts.

Builds the launch spec, a stage context whose log goes to stderr (stdout stays for the report), picks a free
port and the visible GPUs, and runs drafting.serving.evaluation.smoke.run_smoke.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.params.launch import LaunchParams
from drafting.context import StageContext
from drafting.serving.evaluation.smoke import SmokeOptions, SmokeReport, run_smoke
from drafting.serving.launch.host_checks import free_port


@dataclass(frozen=True)
class SmokeRequest:
    draft: Path
    target: Path
    algorithm: str | None = None
    engine: str = "auto"
    depth: int = 3
    port: int = 0  # 0: a free one
    requests: int = 4
    max_new_tokens: int = 32
    min_accept: float = 1.05
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    mem_fraction_static: float | None = None
    ready_timeout_s: float = 900
    echo_log: bool = True
    enforce_checks: bool = True


@dataclass
class StderrContext(StageContext):
    """A stage context for a local command: log lines to stderr (when echoing) and kept."""

    echo: bool = True
    lines: list[str] = field(default_factory=list)

    def log(self, text: str, *, stream: str = "stdout") -> None:  # noqa: ARG002 - the log sink's signature
        self.lines.append(text)
        if self.echo:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


def visible_gpus() -> list[int]:
    try:
        import torch

        return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    except ImportError:
        return []


def launch_params(request: SmokeRequest) -> LaunchParams:
    fields: dict[str, Any] = {
        "engine": request.engine,
        "model": str(Path(request.target).resolve()),
        "draft": str(Path(request.draft).resolve()),
        "depth": request.depth,
        "algorithm": request.algorithm,
        "port": request.port or free_port(),
        "max_running_requests": 4,
        "extra_args": list(request.extra_args),
        "env": dict(request.env),
        "mem_fraction_static": request.mem_fraction_static,
        "ready_timeout_s": request.ready_timeout_s,
        "stop_grace_s": 20,
    }
    return LaunchParams(**fields)


def run_local_smoke(
    request: SmokeRequest,
    *,
    baseline: Sequence[Sequence[int]] | None = None,
    compare: bool = True,
    gpus: Sequence[int] | None = None,
) -> SmokeReport:
    options = SmokeOptions(
        prompts=request.requests,
        max_new_tokens=request.max_new_tokens,
        min_accept_length=request.min_accept,
        enforce_checks=request.enforce_checks,
    )
    with tempfile.TemporaryDirectory(prefix="eyas-smoke-") as work:
        ctx = StderrContext(work_dir=Path(work), echo=request.echo_log)
        ctx.gpus = list(visible_gpus() if gpus is None else gpus)[:1]
        return run_smoke(ctx, launch_params(request), options, baseline=baseline, compare=compare)
