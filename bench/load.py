"""Status polling under load, beside the bare-endpoint ceiling. Prints JSON.

While `--jobs` selftest jobs stream log lines (`--lines-per-second` each) on a real worker, closed-loop
clients poll GET /v1/jobs/{id} (rotating over those jobs) for `--seconds` at each client count; the same
clients then hit a bare FastAPI endpoint (constant JSON, served by uvicorn the same way) while the jobs
still stream, so both figures share the machine's load. `best_within_target` is the highest request rate
whose p99 stays within --target-p99-ms. The fault scenario's figures (accepted jobs kept through broker,
database, API and worker failures) come from the test that asserts them: docs/reliability.md.

    python -m bench.load [--seconds 10] [--clients 1 4 16] [--jobs 20] [--lines-per-second 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import _cli as cli
from bench._harness import bare_endpoint, database, eyas, make_settings, summary_ms

HOST = "bench-load"


async def poll(urls: list[str], headers: dict[str, str], clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def one_client(http: httpx.AsyncClient, offset: int) -> None:
        nonlocal errors
        n = offset
        while time.monotonic() < deadline:
            started = time.perf_counter()
            response = await http.get(urls[n % len(urls)], headers=headers)
            latencies.append(time.perf_counter() - started)
            errors += response.status_code != 200
            n += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:
        await http.get(urls[0], headers=headers)  # warm up
        started = time.monotonic()
        await asyncio.gather(*(one_client(http, i) for i in range(clients)))
        elapsed = time.monotonic() - started
    return {"clients": clients, "requests_per_s": round(len(latencies) / elapsed, 1), "errors": errors,
            **summary_ms(latencies)}  # fmt: skip


def best_within(rows: list[dict[str, Any]], target_ms: float) -> dict[str, Any] | None:
    fits = [r for r in rows if r["p99_ms"] <= target_ms and r["errors"] == 0]
    return max(fits, key=lambda r: r["requests_per_s"]) if fits else None


def start_streaming_jobs(api: str, headers: dict[str, str], args: argparse.Namespace) -> list[str]:
    budget_s = 30 + 2 * len(args.clients) * args.seconds
    params = {"lines": int(args.lines_per_second * budget_s), "lines_per_second": args.lines_per_second}
    ids = []
    for _ in range(args.jobs):
        body = {"kind": "selftest", "host": HOST, "params": params}
        response = httpx.post(f"{api}/v1/jobs", json=body, headers=headers, timeout=30)
        response.raise_for_status()
        ids.append(response.json()["id"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = [httpx.get(f"{api}/v1/jobs/{j}", headers=headers).json()["state"] for j in ids]
        if all(s == "running" for s in states):
            return ids
        time.sleep(0.5)
    raise SystemExit(f"the {args.jobs} jobs did not all start: {states}")


def shipped_lines(api: str, headers: dict[str, str], ids: list[str]) -> int:
    total = 0
    for job_id in ids:
        page = httpx.get(f"{api}/v1/jobs/{job_id}/logs", params={"tail": 1}, headers=headers).json()
        total += page["lines"][-1]["seq"] if page["lines"] else 0
    return total


def measure_polling(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    with database() as db_url:
        settings = make_settings(db_url, tmp / "data", worker_concurrency=max(4, args.jobs))
        with (
            eyas(settings, tmp, worker_host=HOST) as running,
            bare_endpoint(settings, tmp) as bare_url,
        ):
            api, headers = running.url, running.headers
            ids = start_streaming_jobs(api, headers, args)
            lines_before, started = shipped_lines(api, headers, ids), time.monotonic()
            urls = [f"{api}/v1/jobs/{j}" for j in ids]
            polled = [asyncio.run(poll(urls, headers, c, args.seconds)) for c in args.clients]
            bare = [asyncio.run(poll([bare_url], {}, c, args.seconds)) for c in args.clients]
            lines_per_s = (shipped_lines(api, headers, ids) - lines_before) / (time.monotonic() - started)
            for job_id in ids:
                httpx.post(f"{api}/v1/jobs/{job_id}/cancel", headers=headers)
    return {
        "streaming_jobs": args.jobs,
        "lines_per_second_per_job": args.lines_per_second,
        "log_lines_shipped_per_s": round(lines_per_s, 1),
        "eyas_get_job": polled,
        "bare_fastapi": bare,
        "target_p99_ms": args.target_p99_ms,
        "eyas_best_within_target": best_within(polled, args.target_p99_ms),
        "bare_best_within_target": best_within(bare, args.target_p99_ms),
    }


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--lines-per-second", type=float, default=20)
    parser.add_argument("--target-p99-ms", type=float, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out: dict[str, Any] = {"benchmark": "load", "polling": measure_polling(args, Path(tmp))}
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
