"""GPU inventory through NVML (nvidia-ml-py). No NVML or no GPU is a verdict, never a crash."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
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


def memory_holders(indices: Sequence[int]) -> str | None:
    """Who else holds memory on these GPUs, as a sentence for an out-of-memory error, or None when no other
    process holds 1 GiB or more there (or NVML cannot say). A training job beside five other trainings that
    held 130 GiB of an H200 runs out of memory on a batch that fits alone: a smaller batch is the wrong
    advice there."""
    found = inventory()
    return describe_holders(found.gpus, indices, _in_this_job) if found.error is None else None


def describe_holders(
    gpus: Sequence[GpuInfo], indices: Sequence[int], is_own: Callable[[int], bool]
) -> str | None:
    """The sentence `memory_holders` gives, from an inventory and a test of which pids are the job's own."""
    parts = []
    for gpu in gpus:
        if indices and gpu.index not in indices:
            continue
        others = [p for p in gpu.processes if not is_own(p.pid)]
        others.sort(key=lambda p: -(p.used_memory_mib or 0))
        held = sum(p.used_memory_mib or 0 for p in others)
        if held < _WORTH_NAMING_MIB:
            continue
        more = f" and {len(others) - 4} more" if len(others) > 4 else ""
        parts.append(
            f"GPU {gpu.index} had {gpu.memory_used_mib:.0f} of {gpu.memory_total_mib:.0f} MiB in use, "
            f"{held:.0f} MiB of it by {len(others)} other process(es): {listing(others[:4])}{more}"
        )
    return "; ".join(parts) or None


_WORTH_NAMING_MIB = 1024


def listing(processes: Sequence[GpuProcess]) -> str:
    """'pid 1708 (python3 train.py, 38000 MiB), pid 9 (Xorg)': processes as the gate and errors name them."""
    return ", ".join(
        f"pid {p.pid} ({p.name}, {p.used_memory_mib:.0f} MiB)"
        if p.used_memory_mib
        else f"pid {p.pid} ({p.name})"
        for p in processes
    )


def _in_this_job(pid: int) -> bool:
    """Whether `pid` is in this process's group: the runner starts each job in a group of its own, so its
    ranks and helpers are in it and every other job's processes are not."""
    try:
        return os.getpgid(pid) == os.getpgid(0)
    except (ProcessLookupError, PermissionError):
        return False  # not visible here (another container's pid): not ours
