"""What the runner tells a stage's process (workers/handoff.py), with what environment, and how it ended."""

from __future__ import annotations

from pathlib import Path

from app.core.config import Settings
from app.jobs.lifecycle import ClaimedJob, Outcome
from app.jobs.states import JobState
from contract.reasons import TerminationReason
from drafting import proc
from workers import handoff
from workers.events import EventPump

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def outcome_of(
    result: proc.CommandResult,
    pump: EventPump,
    job: ClaimedJob,
    worker_stopped: str | None,
    *,
    refused: str | None = None,
) -> Outcome:
    """How the stage process ended: `worker_stopped` is why its worker stopped it, if it did; `refused` why
    no process took the job on (workers/warm.py NotAccepted)."""
    exit_code = result.exit_code
    if refused is not None:
        return Outcome(
            state=JobState.FAILED,
            reason=TerminationReason.PREFLIGHT_FAILED,
            message=refused,
            exit_code=exit_code,
        )
    if result.cancelled and worker_stopped is not None:
        return Outcome(
            state=JobState.FAILED,
            reason=TerminationReason.WORKER_LOST,
            message=f"its worker stopped: {worker_stopped}",
            exit_code=exit_code,
        )
    if result.cancelled:
        return Outcome(
            state=JobState.CANCELLED,
            reason=TerminationReason.USER_CANCELLED,
            message="cancelled",
            exit_code=exit_code,
        )
    if result.timed_out:
        return Outcome(
            state=JobState.FAILED,
            reason=TerminationReason.TIMEOUT,
            message=f"ran past its timeout of {job.timeout_s} s",
            exit_code=exit_code,
        )
    if exit_code == 0 and pump.result is not None:
        return Outcome(
            state=JobState.SUCCEEDED, reason=TerminationReason.SUCCEEDED, exit_code=0, result=pump.result
        )
    if pump.error is not None:
        return Outcome(
            state=JobState.FAILED,
            reason=str(pump.error.reason or TerminationReason.STAGE_ERROR),
            message=str(pump.error.message),
            exit_code=exit_code,
            result=pump.error.details or None,
        )
    return Outcome(
        state=JobState.FAILED,
        reason=TerminationReason.NONZERO_EXIT,
        message=f"the stage process exited with {exit_code} without a result",
        exit_code=exit_code,
    )


def stage_job(
    job: ClaimedJob, params_file: Path, work_dir: Path, gpus: list[int], settings: Settings
) -> handoff.StageJob:
    """What the job's stage process is told: workers.stage_main's arguments, its environment and folder."""
    args = [
        "--kind",
        job.kind,
        "--params-file",
        str(params_file),
        "--work-dir",
        str(work_dir),
        "--job-id",
        str(job.id),
        "--gpus",
        ",".join(map(str, gpus)),
    ]
    for root in settings.allowed_roots:
        args += ["--allowed-root", str(root)]
    args += ["--data-dir", str(settings.data_dir.resolve())]
    if settings.allow_remote_code:
        args.append("--allow-remote-code")
    return handoff.StageJob(args=args, env=child_env(settings, gpus), cwd=str(work_dir))


def child_env(settings: Settings, gpus: list[int]) -> dict[str, str]:
    env = settings.child_env()
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(PROJECT_ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # so CUDA's numbering matches NVML's indices
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    return env
