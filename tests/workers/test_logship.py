"""The log shipper against the real database: idempotent batches, byte limit with a marker, bounded buffer."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

from app.core.config import Settings
from app.core.db import session_scope
from app.logs import repository
from app.maintenance.loop import expire_logs
from app.models.base import utcnow
from app.models.job import Job
from workers.logship import LogShipper


def make_job(settings: Settings, *, finished_days_ago: float | None = None) -> uuid.UUID:
    job_id = uuid.uuid4()
    finished = utcnow() - timedelta(days=finished_days_ago) if finished_days_ago is not None else None
    with session_scope(settings) as session:
        session.add(
            Job(
                id=job_id,
                kind="selftest",
                params={},
                state="running" if finished is None else "succeeded",
                host="h",
                finished_at=finished,
            )
        )
    return job_id


def stored(settings: Settings, job_id: uuid.UUID) -> list[tuple[int, str]]:
    with session_scope(settings) as session:
        return [(r.seq, r.text) for r in repository.page(session, job_id, after_seq=-1, limit=100_000)]


def test_every_line_is_stored_once_with_increasing_seq(settings: Settings, tmp_path: Path) -> None:
    job_id = make_job(settings)
    shipper = LogShipper(settings, job_id, file_path=tmp_path / "job.log")
    for i in range(5000):
        shipper.on_line("stdout", f"l{i}")
    shipper.close()
    rows = stored(settings, job_id)
    assert [t for _, t in rows] == [f"l{i}" for i in range(5000)]
    assert [s for s, _ in rows] == list(range(1, 5001))
    assert (tmp_path / "job.log").read_text().count("\n") == 5000
    with session_scope(settings) as session:
        assert session.get(Job, job_id).log_seq == 5000  # type: ignore[union-attr]


def test_a_retried_batch_does_not_duplicate_lines(settings: Settings) -> None:
    job_id = make_job(settings)
    batch = [(1, utcnow(), "stdout", "a"), (2, utcnow(), "stdout", "b")]
    with session_scope(settings) as session:
        repository.insert_lines(session, job_id, batch)
    for _ in range(3):
        with session_scope(settings) as session:
            repository.insert_lines(session, job_id, batch, maybe_stored=True)
    assert stored(settings, job_id) == [(1, "a"), (2, "b")]


def test_past_the_byte_limit_the_oldest_lines_give_way_to_a_marker(settings: Settings) -> None:
    small = settings.model_copy(update={"max_log_bytes_per_job": 20_000, "log_batch_bytes": 1000})
    job_id = make_job(small)
    shipper = LogShipper(small, job_id, file_path=None)
    for i in range(2000):
        shipper.on_line("stdout", f"line {i:05d} " + "x" * 40)
    shipper.close()
    rows = stored(small, job_id)
    assert rows[0][1].startswith("[eyas: ")
    assert "earlier line(s) dropped" in rows[0][1]
    dropped = int(rows[0][1].split()[1])
    kept = [t for _, t in rows[1:]]
    assert dropped + len(kept) == 2000
    assert kept[-1].startswith("line 01999")
    assert sum(len(t) + 48 for t in kept) <= 20_000 * 1.1


def test_a_full_buffer_drops_lines_and_says_how_many(settings: Settings) -> None:
    tiny = settings.model_copy(
        update={"log_buffer_bytes": 2_000, "log_batch_interval_s": 5.0, "log_batch_bytes": 10**9}
    )
    job_id = make_job(tiny)
    shipper = LogShipper(tiny, job_id, file_path=None)
    for i in range(500):
        shipper.on_line("stdout", f"line {i}")
    shipper.close()
    rows = [t for _, t in stored(tiny, job_id)]
    markers = [t for t in rows if "dropped: log buffer full" in t]
    assert len(markers) == 1
    dropped = int(markers[0].split()[1])
    assert dropped == shipper.stats.dropped > 0
    assert len(rows) - 1 + dropped == 500


def test_logs_of_jobs_ended_past_the_retention_age_are_deleted(settings: Settings) -> None:
    old = make_job(settings, finished_days_ago=settings.log_retention_days + 1)
    recent = make_job(settings, finished_days_ago=1)
    running = make_job(settings)
    for job_id in (old, recent, running):
        with session_scope(settings) as session:
            repository.insert_lines(session, job_id, [(1, utcnow(), "stdout", "x")])
    assert expire_logs(settings) == 1
    assert stored(settings, old) == []
    assert stored(settings, recent) == [(1, "x")]
    assert stored(settings, running) == [(1, "x")]


def test_a_first_attempt_that_meets_stored_lines_fails_so_the_retry_path_runs(settings: Settings) -> None:
    import pytest

    from app.logs.repository import LinesAlreadyStored

    job_id = make_job(settings)
    batch = [(1, utcnow(), "stdout", "a\tb\\c\nd")]
    with session_scope(settings) as session:
        repository.insert_lines(session, job_id, batch)
    with pytest.raises(LinesAlreadyStored), session_scope(settings) as session:
        repository.insert_lines(session, job_id, batch)
    assert stored(settings, job_id) == [
        (1, "a\tb\\c\nd")
    ]  # COPY escaping round-trips tabs, backslashes, newlines
