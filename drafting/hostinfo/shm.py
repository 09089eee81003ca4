"""/dev/shm: stale segments left by killed SGLang servers and free space."""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

# psm_*: CPython SharedMemory (SGLang < 0.5.14); sgl_shm_<kind>_<pid>_*: SGLang ≥ 0.5.14;
# sglang_loads_* and sem.loky-*: seen left behind by a killed SGLang 0.5.14 server.
STALE_PATTERNS = ("psm_*", "sgl_shm_*", "sglang_loads_*", "sem.loky-*")
_SGL_SHM_PID = re.compile(r"^sgl_shm_[A-Za-z0-9]+_(\d+)_")


@dataclass(frozen=True)
class ShmSegment:
    name: str
    bytes: int
    owner_alive: bool | None  # None when the name carries no owner pid


@dataclass(frozen=True)
class ShmReport:
    path: str
    total_mib: float
    free_mib: float
    segments: list[ShmSegment]

    @property
    def stale(self) -> list[ShmSegment]:
        return [s for s in self.segments if s.owner_alive is not True]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stale_count"] = len(self.stale)
        data["stale_mib"] = sum(s.bytes for s in self.stale) / 2**20
        return data


def scan(path: Path = Path("/dev/shm")) -> ShmReport:
    if not path.is_dir():
        return ShmReport(str(path), 0.0, 0.0, [])
    usage = shutil.disk_usage(path)
    segments = []
    for pattern in STALE_PATTERNS:
        for entry in sorted(path.glob(pattern)):
            segments.append(ShmSegment(entry.name, _size(entry), _owner_alive(entry.name)))
    return ShmReport(str(path), usage.total / 2**20, usage.free / 2**20, segments)


def _owner_alive(name: str) -> bool | None:
    match = _SGL_SHM_PID.match(name)
    if match is None:
        return None
    return bool(psutil.pid_exists(int(match.group(1))))


def _size(entry: Path) -> int:
    try:
        return entry.stat().st_size
    except OSError:
        return 0
