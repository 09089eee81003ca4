"""Dispatch latency: submit → running, p50/p99 over N jobs through the API, Redis and a real worker, beside a
raw Celery round trip (no-op task, result read back) on the same Redis in the same run. Prints JSON.

    python -m bench.dispatch [--jobs 200] [--interval-s 1.0]

Jobs go one after another: the next is submitted once the previous one succeeded (a closed loop), or with
--interval-s, no sooner than that long after the previous submit. The closed loop offers more jobs a second
to faster code, so on a small machine compare builds at one interval as well.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench import _cli as cli
from bench._harness import ROOT, database, eyas, make_settings, summary_ms
from drafting import proc


def eyas_dispatch(jobs: int, tmp: Path, db_url: str, interval_s: float = 0.0) -> dict[str, object]:
    settings = make_settings(db_url, tmp / "data", heartbeat_s=1.0)
    with eyas(settings, tmp, worker_host="bench") as running:
        http = httpx.Client(base_url=running.url, headers=running.headers, timeout=30)
        latencies, end_to_end, to_started, started_to_running = [], [], [], []
        for _ in range(jobs):
            started = time.perf_counter()
            job = http.post(
                "/v1/jobs", json={"kind": "selftest", "host": "bench", "params": {"lines": 0}}
            ).json()
            assert "id" in job, job
            while True:
                current = http.get(f"/v1/jobs/{job['id']}").json()
                assert "state" in current, current
                if current["state"] in ("running", "succeeded", "failed"):
                    break
                time.sleep(0.002)
            created, claimed = _seconds(current["created_at"]), _seconds(current["started_at"])
            latencies.append(_seconds(current["running_at"]) - created)
            to_started.append(claimed - created)
            started_to_running.append(_seconds(current["running_at"]) - claimed)
            done = http.get(f"/v1/jobs/{job['id']}/wait", params={"timeout": 60}).json()
            end_to_end.append(time.perf_counter() - started)
            assert done["state"] == "succeeded", done
            time.sleep(max(0.0, started + interval_s - time.perf_counter()))
    return {
        "submit_to_running": summary_ms(latencies),
        # started_at is stamped by the worker as it claims (API, broker, worker until the claim), running_at
        # once the job's stage process accepted it (the claim's round trip, preparing, the hand-over)
        "submit_to_started": summary_ms(to_started),
        "started_to_running": summary_ms(started_to_running),
        "submit_to_succeeded_client_side": summary_ms(end_to_end),
    }


def raw_celery(n: int, tmp: Path) -> dict[str, object]:
    from bench._raw_celery import app, noop

    worker = proc.spawn(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench._raw_celery",
            "worker",
            "--pool",
            "solo",
            "-Q",
            "bench.raw",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        output=tmp / "raw.log",
    )
    try:
        noop.delay().get(timeout=60)
        times = []
        for _ in range(n):
            started = time.perf_counter()
            noop.delay().get(timeout=30, interval=0.001)
            times.append(time.perf_counter() - started)
    finally:
        proc.terminate_group(worker.pid, grace_s=5, popen=worker)
        app.close()
    return {"round_trip": summary_ms(times)}


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--interval-s", type=float, default=0.0, help="submit no more often than this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, database() as db_url:
        eyas = eyas_dispatch(args.jobs, Path(tmp), db_url, args.interval_s)
        raw = raw_celery(args.jobs, Path(tmp))
    report = {"benchmark": "dispatch", "jobs": args.jobs, "interval_s": args.interval_s}
    print(json.dumps({**report, "eyas": eyas, "raw_celery_same_redis": raw}, indent=2))


if __name__ == "__main__":
    main()
