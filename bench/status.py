"""Status reads: GET /v1/jobs/{id} at 32 concurrent clients against PostgreSQL, with the default settings
and again with the principal cache off (EYAS_AUTH_CACHE_S=0: the token row read on every request), beside a
bare FastAPI endpoint returning constant JSON on the same uvicorn settings, in the same run. Prints JSON.

    python -m bench.status [--seconds 10] [--clients 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx

from app.core.config import Settings
from bench import _cli as cli
from bench._harness import bare_endpoint, database, eyas, make_settings, register_idle_host, summary_ms


async def load(url: str, headers: dict[str, str], clients: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def one_client(http: httpx.AsyncClient) -> None:
        nonlocal errors
        while time.monotonic() < deadline:
            started = time.perf_counter()
            response = await http.get(url, headers=headers)
            latencies.append(time.perf_counter() - started)
            errors += response.status_code != 200

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:
        await http.get(url, headers=headers)  # warm up
        started = time.monotonic()
        await asyncio.gather(*(one_client(http) for _ in range(clients)))
        elapsed = time.monotonic() - started
    return {"requests_per_s": round(len(latencies) / elapsed, 1), "errors": errors, **summary_ms(latencies)}


def eyas_reads(settings: Settings, folder: Path, args: argparse.Namespace) -> dict[str, float]:
    register_idle_host(settings, "bench")
    with eyas(settings, folder) as running:
        job = httpx.post(
            f"{running.url}/v1/jobs", json={"kind": "selftest", "host": "bench"}, headers=running.headers
        )
        if job.status_code != 201:
            raise SystemExit(job.text)
        job_url = f"{running.url}/v1/jobs/{job.json()['id']}"
        return asyncio.run(load(job_url, running.headers, args.clients, args.seconds))


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    out: dict[str, object] = {"benchmark": "status_reads", "clients": args.clients, "seconds": args.seconds}
    with tempfile.TemporaryDirectory() as tmp, database() as db_url:
        settings = make_settings(db_url, Path(tmp) / "data")
        cached = eyas_reads(settings, Path(tmp), args)
        uncached = eyas_reads(settings.model_copy(update={"auth_cache_s": 0.0}), Path(tmp), args)
        with bare_endpoint(settings, Path(tmp)) as bare_url:
            bare = asyncio.run(load(bare_url, {}, args.clients, args.seconds))
    out |= {
        "eyas_get_job": {"auth_cache_s": settings.auth_cache_s, **cached},
        "eyas_get_job_auth_cache_off": uncached,
        "bare_fastapi": bare,
        "throughput_ratio": round(cached["requests_per_s"] / bare["requests_per_s"], 3),
        "throughput_ratio_auth_cache_off": round(uncached["requests_per_s"] / bare["requests_per_s"], 3),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
