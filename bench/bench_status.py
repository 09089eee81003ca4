"""Status reads: GET /v1/jobs/{id} at 32 concurrent clients against PostgreSQL, beside a bare FastAPI
endpoint returning constant JSON on the same uvicorn settings, in the same run. Prints JSON.

    .venv/bin/python bench/bench_status.py [--seconds 10] [--clients 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx
from _harness import bare_endpoint, database, eyas, make_settings, summary_ms


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, database() as db_url:
        settings = make_settings(db_url, Path(tmp) / "data")
        with eyas(settings, Path(tmp)) as running:
            job = httpx.post(
                f"{running.url}/v1/jobs", json={"kind": "selftest", "host": "bench"}, headers=running.headers
            )
            if job.status_code != 201:
                raise SystemExit(job.text)
            job_url = f"{running.url}/v1/jobs/{job.json()['id']}"
            eyas_reads = asyncio.run(load(job_url, running.headers, args.clients, args.seconds))
        with bare_endpoint(settings, Path(tmp)) as bare_url:
            bare = asyncio.run(load(bare_url, {}, args.clients, args.seconds))
    print(
        json.dumps(
            {
                "benchmark": "status_reads",
                "clients": args.clients,
                "seconds": args.seconds,
                "eyas_get_job": eyas_reads,
                "bare_fastapi": bare,
                "throughput_ratio": round(eyas_reads["requests_per_s"] / bare["requests_per_s"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
