"""Checks that look at the host: paths, the port, /dev/shm."""

from __future__ import annotations

import errno
import fnmatch
import os
import random
import shutil
import socket
from pathlib import Path

from drafting import sglang_facts as rules
from drafting.findings import Finding, error, info, warning


def check_model_folder(label: str, folder: str) -> Finding | None:
    path = Path(folder)
    if not path.is_dir():
        return error("PATH_MISSING", f"{label} folder {folder} does not exist on this host", f"fix `{label}`")
    if not (path / "config.json").is_file():
        message = f"{label} folder {folder} has no config.json"
        return error("PATH_MISSING", message, f"point `{label}` at the folder holding config.json")
    return None


def check_file_exists(flag: str, value: str) -> Finding | None:
    if Path(value).exists():
        return None
    return error("PATH_MISSING", f"{flag} {value} does not exist on this host", f"fix the value of {flag}")


def check_grpc_port(port: int, version: str, env: dict[str, str]) -> Finding | None:
    """SGLang 0.5.14 exits at start-up when --port + 10000 passes 65535 and SGLANG_GRPC_PORT is unset."""
    limit = rules.grpc_port_limit(version)
    if limit is None or port <= limit or rules.GRPC_PORT_ENV in env:
        return None
    message = (
        f"port {port}: SGLang {version} derives its gRPC port as port + {rules.GRPC_PORT_OFFSET} = "
        f"{port + rules.GRPC_PORT_OFFSET} and refuses to start above {rules.HIGHEST_PORT}"
    )
    return error("PORT_TOO_HIGH", message, f"use a port <= {limit}, or set env {rules.GRPC_PORT_ENV}")


def free_port() -> int:
    """A free local port SGLang accepts (<= 55535, see grpc_port_limit): the kernel's ephemeral range
    reaches 60999, past SGLang 0.5.14's limit, so the OS cannot be left to choose."""
    highest = rules.HIGHEST_PORT - rules.GRPC_PORT_OFFSET
    for candidate in random.Random().sample(range(20000, highest + 1), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    raise RuntimeError(f"no free port between 20000 and {highest}")


def check_port_free(host: str, port: int) -> Finding | None:
    """Bind the port as the server will (SO_REUSEADDR, like uvicorn): a listener already there is found."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                message = f"port {port} on {host} is in use: SGLang would load the model, then fail to bind"
                return error("PORT_IN_USE", message, "stop the server holding it, or pick another port")
            return error(
                "PORT_UNUSABLE", f"cannot bind {host}:{port}: {exc.strerror}", "check `host` and `port`"
            )
    return None


def check_shm(shm_dir: Path, *, min_free_mib: int = rules.MIN_SHM_FREE_MIB) -> list[Finding]:
    """Stale SGLang/loky segments and free space in /dev/shm (RAM-backed; full → schedulers die of SIGBUS)."""
    if not shm_dir.is_dir():
        return [info("SHM_UNCHECKED", f"{shm_dir} does not exist here; shared memory not checked")]
    findings: list[Finding] = []
    stale = stale_shm_segments(shm_dir)
    if stale:
        size_mib = sum(_size(shm_dir / name) for name in stale) / 2**20
        shown = ", ".join(stale[:8]) + (" …" if len(stale) > 8 else "")
        message = f"{len(stale)} stale segment(s) in {shm_dir} ({size_mib:.1f} MiB): {shown}"
        fix = "run a gpu_check job with clean_own_orphans, or remove them once no SGLang process runs"
        findings.append(warning("SHM_STALE_SEGMENTS", message, fix))
    free_mib = shutil.disk_usage(shm_dir).free / 2**20
    if free_mib < min_free_mib:
        message = f"{shm_dir} has {free_mib:.0f} MiB free (< {min_free_mib} MiB)"
        findings.append(
            error("SHM_LOW", message, "free /dev/shm (stale segments) or enlarge it (docker --shm-size)")
        )
    return findings


def stale_shm_segments(shm_dir: Path) -> list[str]:
    """Segments matching SGLang's names whose owner is gone (sgl_shm_<kind>_<pid>_<rand> names its pid)."""
    names = sorted(os.listdir(shm_dir))
    matched = [n for n in names if any(fnmatch.fnmatch(n, glob) for glob in rules.STALE_SHM_GLOBS)]
    return [n for n in matched if not _owner_alive(n)]


def _owner_alive(name: str) -> bool:
    if not name.startswith("sgl_shm_"):
        return False
    for part in name.split("_")[3:]:
        if part.isdigit():
            return _pid_alive(int(part))
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
