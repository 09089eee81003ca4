"""Log benchmarks (prints JSON):

- follow latency: a child process writes stamped lines at a steady rate; an SSE client receives them through
  the API; p50/p99 of (received - written) over N lines;
- ingest: one job printing M lines of ~100 bytes as fast as it can: lines/s end to end (stored in the
  database) with zero loss, and the worker's peak RSS;
- 20 followers: the same ingest with 20 concurrent SSE followers of that job: the API's CPU seconds and the
  database transactions (pg_stat_database.xact_commit) beside the run without followers.

    python -m bench.logs [--follow-lines 5000 --rate 500 --ingest-lines 500000 --followers 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import psycopg

from bench import _cli as cli
from bench._harness import Eyas, database, eyas, make_settings, summary_ms


async def follow(url: str, headers: dict[str, str], job_id: str, stamped: bool) -> tuple[int, list[float]]:
    delays: list[float] = []
    count = 0
    async with httpx.AsyncClient(timeout=None) as http:
        async with http.stream("GET", f"{url}/v1/jobs/{job_id}/logs/stream", headers=headers) as response:
            async for raw in response.aiter_lines():
                if raw.startswith("event: end"):
                    break
                if not raw.startswith("data: "):
                    continue
                text = json.loads(raw[6:])["text"]
                if text.startswith("line "):
                    count += 1
                    if stamped:
                        delays.append(time.time() - float(text.split()[2]))
    return count, delays


def submit(http: httpx.Client, params: dict[str, object]) -> str:
    job = http.post("/v1/jobs", json={"kind": "selftest", "host": "bench", "params": params})
    job.raise_for_status()
    return str(job.json()["id"])


def wait_running(http: httpx.Client, job_id: str) -> None:
    while http.get(f"/v1/jobs/{job_id}").json()["state"] == "queued":
        time.sleep(0.01)


def commits(db_url: str) -> int:
    plain = db_url.replace("postgresql+psycopg://", "postgresql://")
    name = plain.rsplit("/", 1)[1]
    with psycopg.connect(plain) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--follow-lines", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--ingest-lines", type=int, default=500_000)
    parser.add_argument("--followers", type=int, default=20)
    parser.add_argument("--follower-lines", type=int, default=20_000, help="job size for the followers run")
    args = parser.parse_args()
    out: dict[str, object] = {"benchmark": "logs"}
    with tempfile.TemporaryDirectory() as tmp, database() as db_url:
        settings = make_settings(db_url, Path(tmp) / "data", heartbeat_s=1.0)
        with eyas(settings, Path(tmp), worker_host="bench") as running:
            http = httpx.Client(base_url=running.url, headers=running.headers, timeout=60)
            out["follow_latency"] = run_follow(http, running, args)
            out["ingest"] = run_ingest(http, running, args, db_url, followers=0)
            followed = argparse.Namespace(**{**vars(args), "ingest_lines": args.follower_lines})
            out["same_size_without_followers"] = run_ingest(http, running, followed, db_url, followers=0)
            out["ingest_with_followers"] = run_ingest(
                http, running, followed, db_url, followers=args.followers
            )
    print(json.dumps(out, indent=2))


def run_follow(http: httpx.Client, running: Eyas, args: argparse.Namespace) -> dict[str, object]:
    job_id = submit(http, {"lines": args.follow_lines, "lines_per_second": args.rate, "stamp": True})
    wait_running(http, job_id)
    count, delays = asyncio.run(follow(running.url, running.headers, job_id, stamped=True))
    return {"lines": args.follow_lines, "received": count, "rate_per_s": args.rate, **summary_ms(delays)}


def run_ingest(
    http: httpx.Client, running: Eyas, args: argparse.Namespace, db_url: str, *, followers: int
) -> dict[str, object]:
    api_cpu_before = _cpu(running.api.pid)
    commits_before = commits(db_url)
    job_id = submit(http, {"lines": args.ingest_lines, "line_bytes": 100})
    received: list[int] = []
    watcher = threading.Thread(
        target=lambda: received.extend(asyncio.run(_watch(running, job_id, followers))), daemon=True
    )
    started = time.monotonic()
    wait_running(http, job_id)
    if followers:
        watcher.start()
    peak_rss = 0
    while not http.get(f"/v1/jobs/{job_id}").json()["terminal"]:
        assert running.worker is not None
        peak_rss = max(peak_rss, _rss(running.worker.pid))
        time.sleep(0.05)
    stored_at = time.monotonic() - started
    if followers:
        watcher.join()
    followers_done = time.monotonic() - started
    stored = sum(1 for line in _all_lines(http, job_id) if line.startswith("line "))
    return {
        "lines": args.ingest_lines,
        "stored": stored,
        "lost": args.ingest_lines - stored,
        "lines_per_s_stored": round(stored / stored_at),
        "stored_after_s": round(stored_at, 2),
        "worker_peak_rss_mib": round(peak_rss / 2**20, 1),
        "followers": followers,
        "followers_received_all": all(r == args.ingest_lines for r in received) if followers else None,
        "followers_done_after_s": round(followers_done, 2) if followers else None,
        "api_cpu_s": round(_cpu(running.api.pid) - api_cpu_before, 2),
        "db_transactions": commits(db_url) - commits_before,
    }


async def _watch(running: Eyas, job_id: str, followers: int) -> list[int]:
    followed = (follow(running.url, running.headers, job_id, stamped=False) for _ in range(followers))
    results = await asyncio.gather(*followed)
    return [count for count, _ in results]


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _all_lines(http: httpx.Client, job_id: str) -> list[str]:
    texts: list[str] = []
    cursor = 0
    while True:
        page = http.get(f"/v1/jobs/{job_id}/logs", params={"cursor": cursor, "limit": 5000}).json()
        texts += [line["text"] for line in page["lines"]]
        if not page["lines"]:
            return texts
        cursor = page["next_cursor"]


def _rss(pid: int) -> int:
    try:
        return int(psutil.Process(pid).memory_info().rss)  # the worker (stage children are other programs)
    except psutil.Error:
        return 0


if __name__ == "__main__":
    main()
