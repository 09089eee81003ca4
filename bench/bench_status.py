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
from _harness import (
    admin_token,
    database,
    free_port,
    make_settings,
    service,
    summary_ms,
)


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
        token = admin_token(settings)
        headers = {"Authorization": f"Bearer {token}"}
        api_port, bare_port = free_port(), free_port()
        api_url = f"http://127.0.0.1:{api_port}"
        with service(
            ["-m", "cli.main", "api", "--port", str(api_port)],
            settings,
            Path(tmp) / "api.log",
            ready_url=f"{api_url}/healthz",
        ):
            job = httpx.post(
                f"{api_url}/v1/jobs", json={"kind": "selftest", "host": "bench"}, headers=headers
            )
            job_id = job.json()["id"] if job.status_code == 201 else None
            if job_id is None:  # no host registered: place it explicitly on a named host
                raise SystemExit(job.text)
            eyas = asyncio.run(load(f"{api_url}/v1/jobs/{job_id}", headers, args.clients, args.seconds))
        bare_argv = [
            "-m",
            "uvicorn",
            "bench._bare_app:app",
            "--port",
            str(bare_port),
            "--log-level",
            "info",
            "--no-access-log",
            "--http",
            "h11",  # eyas api serves with h11 (a header-size limit)
        ]
        with service(
            bare_argv, settings, Path(tmp) / "bare.log", ready_url=f"http://127.0.0.1:{bare_port}/job"
        ):
            bare = asyncio.run(load(f"http://127.0.0.1:{bare_port}/job", {}, args.clients, args.seconds))
    print(
        json.dumps(
            {
                "benchmark": "status_reads",
                "clients": args.clients,
                "seconds": args.seconds,
                "eyas_get_job": eyas,
                "bare_fastapi": bare,
                "throughput_ratio": round(eyas["requests_per_s"] / bare["requests_per_s"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
