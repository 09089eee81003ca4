"""A stand-in for nvidia-ml-py's `pynvml`, put first on a test worker's PYTHONPATH: idle H200s, as many as
the file `gpus` beside this module says (a file, since a job's process gets an allow-listed environment).
This machine has no GPU; eyas reads only the calls below (drafting/hostinfo/gpus.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
_MIB = 2**20


class NVMLError(Exception):
    pass


def nvmlInit() -> None:  # pynvml's names
    pass


def nvmlDeviceGetCount() -> int:
    count = Path(__file__).with_name("gpus")
    return int(count.read_text()) if count.exists() else 1


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    return SimpleNamespace(used=615 * _MIB, total=143_771 * _MIB)


def nvmlDeviceGetUUID(handle: int) -> str:
    return f"GPU-standin-{handle:04d}"


def nvmlDeviceGetName(handle: int) -> str:
    return "NVIDIA H200 (stand-in)"


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=0, memory=0)


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return 88_000


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    return 40


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[object]:
    return []


def nvmlDeviceGetGraphicsRunningProcesses(handle: int) -> list[object]:
    return []
