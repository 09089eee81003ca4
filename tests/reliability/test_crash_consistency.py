"""No half-done work is ever visible: kill -9 the API (and PostgreSQL itself) in the middle of submissions,
and the converter in the middle of writing a checkpoint."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import text

from app.core.db import session_scope
from drafting import proc
from tests._drafts import DraftShape, write_speculators_draft
from tests.app.test_jobs_api import register_host
from tests.reliability._stack import Stack
from testsupport.timing import eventually

ROOT = Path(__file__).resolve().parents[2]
IDLE_HOST = "idle-host"  # registered, no worker: its jobs stay queued
# ~150 MB of weights: a converter killed at a random moment is often caught in the middle of writing.
LARGE_DRAFT = DraftShape(
    hidden=512, intermediate=2048, heads=8, kv_heads=2, vocab=32_000, draft_vocab=8_000, max_positions=4096
)


class Submitters:
    """Threads that submit as fast as they can (each with an Idempotency-Key, half depending on an earlier
    job) and remember every 201, until stopped; errors are expected while things are killed."""

    def __init__(self, url: str, headers: dict[str, str], threads: int = 6) -> None:
        self.url, self.headers = url, headers
        self.created: dict[str, str] = {}  # job id -> idempotency key
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Submitters:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._halt.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def accepts_more(self, count: int = 5) -> None:
        """Until `count` more submissions than now were answered 201."""
        before = len(self.created)
        eventually(lambda: len(self.created) >= before + count, within_s=60, what=f"{count} more accepted")

    def _loop(self) -> None:
        parent: str | None = None
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=5) as http:
            while not self._halt.is_set():
                key = uuid.uuid4().hex
                body = {"kind": "selftest", "host": IDLE_HOST, "depends_on": [parent] if parent else []}
                try:
                    response = http.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
                except httpx.TransportError:
                    time.sleep(0.05)
                    continue
                if response.status_code == 201:
                    with self._lock:
                        self.created[response.json()["id"]] = key
                    parent = None if parent else response.json()["id"]
                else:
                    time.sleep(0.05)


def partial_rows(stack: Stack) -> dict[str, int]:
    """Counts of rows that a half-applied submission would leave; every one must be zero."""
    queries = {
        "job_without_submitted_event": "SELECT count(*) FROM job j WHERE NOT EXISTS "
        "(SELECT 1 FROM job_event e WHERE e.job_id = j.id AND e.reason = 'SUBMITTED')",
        "job_without_idempotency_key": "SELECT count(*) FROM job j WHERE NOT EXISTS "
        "(SELECT 1 FROM idempotency_key k WHERE k.job_id = j.id)",
        "pending_without_dependency": "SELECT count(*) FROM job j WHERE j.state = 'pending' AND NOT EXISTS "
        "(SELECT 1 FROM job_dependency d WHERE d.job_id = j.id)",
        "queued_never_dispatched": "SELECT count(*) FROM job "
        "WHERE state = 'queued' AND dispatched_at IS NULL",
    }
    with session_scope(stack.settings) as session:
        return {name: int(session.execute(text(sql)).scalar_one()) for name, sql in queries.items()}


def stored_keys(stack: Stack) -> dict[str, str]:
    with session_scope(stack.settings) as session:
        rows = session.execute(text("SELECT job_id, key FROM idempotency_key")).all()
    return {str(job_id): key for job_id, key in rows}


def test_killing_the_api_or_postgres_mid_submission_leaves_no_partial_rows(stack: Stack) -> None:
    register_host(stack.settings, IDLE_HOST)
    stack.start_api()
    with Submitters(stack.url, stack.headers) as load:
        for _ in range(2):
            load.accepts_more()  # each kill lands amid submissions
            assert stack.api is not None
            stack.api.kill9()
            stack.start_api()
        load.accepts_more()
        stack.pg.stop(crash=True)  # SIGKILL of the postmaster: crash recovery on the next start
        stack.pg.start()
        load.accepts_more()  # and submissions go on after crash recovery
    assert partial_rows(stack) == dict.fromkeys(partial_rows(stack), 0)
    keys = stored_keys(stack)
    missing = {job: key for job, key in load.created.items() if keys.get(job) != key}
    assert missing == {}, "jobs answered 201 that are not stored with their key"


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_converter_killed_at_any_moment_leaves_no_half_written_checkpoint(tmp_path: Path) -> None:
    source = write_speculators_draft(tmp_path / "draft", LARGE_DRAFT)
    reference = tmp_path / "reference"
    argv = [sys.executable, "-m", "drafting.checkpoint", "fix", str(source)]
    complete = proc.spawn([*argv, str(reference)], cwd=ROOT, output=tmp_path / "reference.log")
    assert complete.wait(timeout=120) == 0, (tmp_path / "reference.log").read_text()
    expected = digest(reference)
    caught_midway = 0
    for step in range(12):
        dest = tmp_path / f"out{step}"
        converter = proc.spawn([*argv, str(dest)], cwd=ROOT, output=tmp_path / f"out{step}.log")
        caught_midway += kill_while_building(converter, dest, offset_s=step * 0.01)
        assert not dest.exists() or digest(dest) == expected, f"a partial checkpoint under {dest.name}"
    assert caught_midway >= 3, "too few kills landed while the converter was writing"
    rerun = proc.spawn([*argv, str(tmp_path / "out0")], cwd=ROOT, output=tmp_path / "rerun.log")
    assert rerun.wait(timeout=120) == 0
    assert digest(tmp_path / "out0") == expected
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out0.eyas-tmp")], "leftovers not cleaned"


def kill_while_building(popen: subprocess.Popen[bytes], dest: Path, offset_s: float) -> int:
    """SIGKILL the converter offset_s after its work-in-progress folder appears; 1 if it was still running."""
    deadline = time.monotonic() + 60
    while popen.poll() is None and time.monotonic() < deadline:
        if any(p.name.startswith(f".{dest.name}.eyas-tmp") for p in dest.parent.iterdir()):
            break
        time.sleep(0.002)
    time.sleep(offset_s)  # the moment of the kill is what is under test
    killed = popen.poll() is None
    if killed:
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()
    return int(killed)
