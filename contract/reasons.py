"""Why a job ended the way it did: one enum for the API, the runtime and the stages (stored as its value)."""

from __future__ import annotations

from enum import StrEnum


class TerminationReason(StrEnum):
    """Why a job ended the way it did (machine-readable, stable)."""

    SUCCEEDED = "SUCCEEDED"
    NONZERO_EXIT = "NONZERO_EXIT"
    STAGE_ERROR = "STAGE_ERROR"
    GPU_NOT_CLEAN = "GPU_NOT_CLEAN"
    NO_GPU = "NO_GPU"
    PREFLIGHT_FAILED = "PREFLIGHT_FAILED"
    PATH_NOT_ALLOWED = "PATH_NOT_ALLOWED"
    WORKER_LOST = "WORKER_LOST"
    TIMEOUT = "TIMEOUT"
    USER_CANCELLED = "USER_CANCELLED"
    SERVER_DIED = "SERVER_DIED"
    DEPENDENCY_FAILED = "DEPENDENCY_FAILED"
    DATA_MISMATCH = "DATA_MISMATCH"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NAN_LOSS = "NAN_LOSS"
    DISK_FULL = "DISK_FULL"
    CHECKPOINT_INVALID = "CHECKPOINT_INVALID"
    LAUNCH_CHECK_FAILED = "LAUNCH_CHECK_FAILED"
    RELEASE_GATE_FAILED = "RELEASE_GATE_FAILED"
    # outputs pass, but the speedup's interval is too wide to call: more requests would decide
    RELEASE_GATE_INCONCLUSIVE = "RELEASE_GATE_INCONCLUSIVE"
    BAD_INPUT = "BAD_INPUT"  # a user-given file eyas will not read: a FIFO, a device, a folder, too large
    REMOTE_CODE_NOT_ALLOWED = (
        "REMOTE_CODE_NOT_ALLOWED"  # a target needing its own code, not allowed to run it
    )
