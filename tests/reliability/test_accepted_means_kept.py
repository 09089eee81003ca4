"""Accepted means kept: every job the API answered 2xx for ends exactly once and never runs twice, while
Redis, PostgreSQL, the API and a worker are restarted under a steady stream of submissions.

Clients retry a submission (same Idempotency-Key, same body) after a 503 or a dropped connection, as a
well-behaved client does; the marker file each selftest job appends to counts its runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.reliability._load import JobFate, LoadClients
from tests.reliability._scenario import FaultReport, run_fault_scenario
from tests.reliability._stack import Stack


def check_accepted_jobs_were_kept(
    report: FaultReport, load: LoadClients, found: dict[str, JobFate], tmp_path: Path
) -> None:
    _publish(report, tmp_path)
    assert report.unexpected_responses == [], report.unexpected_responses
    assert report.accepted == report.total, "every submission is eventually accepted"
    assert len(found) == report.accepted, "every accepted job is in the database"
    assert report.jobs_in_db == report.accepted, "no job was created twice by a retried submission"
    assert report.lost == 0, [f for f in found.values() if f.terminal_events != 1]
    # A job on a live worker is never failed as lost, whatever the outage (with max_attempts > 1 it would
    # run twice): wrongly_lost_jobs names the fault phase each one was failed in.
    assert report.wrongly_lost == 0, (report.wrongly_lost_by_phase, report.wrongly_lost_jobs[:10])
    assert report.duplicated == 0, [f for f in found.values() if f.runs > 1]
    for fate in found.values():
        if fate.state == "succeeded":
            assert fate.runs == 1, fate
        else:  # the only way a job may fail here is losing the killed worker (max_attempts=1: no retry)
            assert (fate.state, fate.reason) == ("failed", "WORKER_LOST"), fate
    redis = report.windows[0]
    assert redis.up_at is not None
    sent_while_down = [t for t, a in load.seen.accepted.items() if redis.down_at <= a.sent_at < redis.up_at]
    assert sent_while_down, "no job was sent while Redis was down; the scenario proved nothing"
    assert all(found[t].worker is not None for t in sent_while_down), (
        "a job sent while Redis was down never ran"
    )
    assert report.completed == report.accepted - report.worker_lost


def _publish(report: FaultReport, tmp_path: Path) -> None:
    """Print the figures (pytest -s shows them) and append them to EYAS_RELIABILITY_REPORT if set."""
    text = json.dumps(report.as_dict(), default=str)
    print(text)
    (tmp_path / "fault-report.json").write_text(text)
    target = os.environ.get("EYAS_RELIABILITY_REPORT")
    if target:
        with open(target, "a") as fh:
            fh.write(text + "\n")


def test_accepted_jobs_survive_restarts_of_redis_postgres_api_and_a_worker(
    stack: Stack, tmp_path: Path
) -> None:
    report, load, found, _ = run_fault_scenario(stack, total=60, clients=6)
    check_accepted_jobs_were_kept(report, load, found, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_accepted_jobs_survive_restarts_at_500_jobs_from_20_clients(stack: Stack, tmp_path: Path) -> None:
    report, load, found, _ = run_fault_scenario(stack, total=500, clients=20, settle_s=8)
    check_accepted_jobs_were_kept(report, load, found, tmp_path)
