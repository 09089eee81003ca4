"""Drafter checkpoints for SGLang: the doctor (`diagnose`) and the converter (`fix_checkpoint`).

Importing this package pulls no torch: the doctor reads headers, and the converter copies bytes.
"""

from drafting.checkpoint.doctor import DEFAULT_SGLANG_VERSION, diagnose
from drafting.checkpoint.errors import CheckpointError, PickleWeightsError
from drafting.checkpoint.fix import fix_checkpoint
from drafting.checkpoint.report import DoctorReport, FixReport, TensorMove

__all__ = [
    "DEFAULT_SGLANG_VERSION",
    "CheckpointError",
    "DoctorReport",
    "FixReport",
    "PickleWeightsError",
    "TensorMove",
    "diagnose",
    "fix_checkpoint",
]
