"""GPU inventory through NVML (nvidia-ml-py). No NVML or no GPU is a verdict, never a crash."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

try:
    import pynvml  # provided by nvidia-ml-py
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
    pynvml = None

_init_lock = threading.Lock()
_initialised = False


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_memory_mib: float | None


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_used_mib: float
    memory_total_mib: float
    utilization_pct: float | None
    power_w: float | None
    temperature_c: float | None
    processes: list[GpuProcess] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuInventory:
    gpus: list[GpuInfo]
    error: str | None  # why there are no GPUs (no driver, NVML failure), or None

    def to_dicts(self) -> list[dict[str, Any]]:
        return [g.to_dict() for g in self.gpus]


def _ensure_init() -> str | None:
    global _initialised
    if pynvml is None:
        return "nvidia-ml-py is not installed"
    with _init_lock:
        if _initialised:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return f"no NVIDIA driver: {exc}"
        _initialised = True
        return None


def inventory() -> GpuInventory:
    """Every GPU NVML sees, with the processes holding it."""
    error = _ensure_init()
    if error is not None:
        return GpuInventory([], error)
    assert pynvml is not None
    try:
        count = pynvml.nvmlDeviceGetCount()
        gpus = [_read_gpu(i) for i in range(count)]
    except pynvml.NVMLError as exc:
        return GpuInventory([], f"NVML query failed: {exc}")
    return GpuInventory(gpus, None if gpus else "NVML reports no GPUs")


def _read_gpu(index: int) -> GpuInfo:
    assert pynvml is not None
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return GpuInfo(
        index=index,
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        memory_used_mib=memory.used / 2**20,
        memory_total_mib=memory.total / 2**20,
        utilization_pct=_optional(lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
        power_w=_optional(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
        temperature_c=_optional(
            lambda: float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
        ),
        processes=_processes(handle),
    )


def _processes(handle: Any) -> list[GpuProcess]:
    assert pynvml is not None
    seen: dict[int, GpuProcess] = {}
    for getter in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
        try:
            procs = getter(handle)
        except pynvml.NVMLError:
            continue
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            seen[proc.pid] = GpuProcess(proc.pid, _process_name(proc.pid), used / 2**20 if used else None)
    return list(seen.values())


def _process_name(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline()[:3]) or psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def _optional(read: Any) -> float | None:
    assert pynvml is not None
    try:
        return float(read())
    except (pynvml.NVMLError, TypeError, ValueError):
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
