"""Concurrent submitters that keep retrying until the API accepts, and the accounting of what became of it.

Each submission carries a tag: its Idempotency-Key and the name of the marker file its selftest job appends
to when it runs. A client retries a tag (same key, same body) after a 503 or a dropped connection until it
gets 201 (created) or 200 (an earlier attempt had created it), so "accepted" is exactly the set of tags
the API answered 2xx for, and the marker files say how many times each one ran.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from app.core.config import Settings
from app.core.db import session_scope
from app.jobs.states import TERMINAL
from app.models.job import Job, JobEvent

RETRY_PAUSE_S = 0.2


@dataclass
class Accepted:
    tag: str
    job_id: str
    status: int
    sent_at: datetime  # when the request that got the 2xx was sent
    at: datetime  # when its answer arrived


@dataclass
class Submissions:
    """What every client saw, shared between the client threads."""

    accepted: dict[str, Accepted] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, outcome: str, detail: str | None = None) -> None:
        with self.lock:
            self.statuses[outcome] += 1
            if detail is not None and len(self.unexpected) < 20:
                self.unexpected.append(detail)


class LoadClients:
    """`clients` threads submit `total` selftest jobs, spread evenly over `spread_s` seconds."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        marker_dir: Path,
        *,
        total: int,
        clients: int,
        spread_s: float,
        hosts: list[str],
        params: dict[str, Any] | None = None,
    ) -> None:
        self.url, self.headers, self.marker_dir = url, headers, marker_dir
        self.total, self.clients, self.spread_s, self.hosts = total, clients, spread_s, hosts
        self.params = params or {"lines": 2, "sleep_s": 0.2}
        self.tags = [f"t{i:05d}-{uuid.uuid4().hex[:8]}" for i in range(total)]
        self.seen = Submissions()
        self._threads: list[threading.Thread] = []
        marker_dir.mkdir(parents=True, exist_ok=True)

    def start(self) -> LoadClients:
        for index in range(self.clients):
            mine = self.tags[index :: self.clients]
            thread = threading.Thread(target=self._client, args=(index, mine), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = sum(t.is_alive() for t in self._threads)
        assert stuck == 0, f"{stuck} client(s) still retrying after {timeout_s} s: {self.seen.statuses}"

    def marker(self, tag: str) -> Path:
        return self.marker_dir / tag

    def body(self, index: int, tag: str) -> dict[str, Any]:
        params = {**self.params, "marker_file": str(self.marker(tag))}
        return {"kind": "selftest", "host": self.hosts[index % len(self.hosts)], "params": params}

    def _client(self, index: int, tags: list[str]) -> None:
        started = time.monotonic()
        pace = self.spread_s / max(1, len(tags))
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=30) as http:
            for n, tag in enumerate(tags):
                pause = started + n * pace + index * pace / self.clients - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                self._submit_until_accepted(http, index + n, tag)

    def _submit_until_accepted(self, http: httpx.Client, index: int, tag: str) -> None:
        body = self.body(index, tag)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            sent_at = datetime.now(UTC)
            try:
                response = http.post("/v1/jobs", json=body, headers={"Idempotency-Key": tag})
            except httpx.TransportError as exc:
                self.seen.note(f"transport:{type(exc).__name__}")
                time.sleep(RETRY_PAUSE_S)
                continue
            if response.status_code in (200, 201):
                self.seen.note(str(response.status_code))
                job_id = response.json()["id"]
                accepted = Accepted(tag, job_id, response.status_code, sent_at, datetime.now(UTC))
                with self.seen.lock:
                    self.seen.accepted[tag] = accepted
                return
            expected = response.status_code == 503 and _is_problem(response, "DATABASE_UNAVAILABLE")
            expected |= response.status_code == 409 and _is_problem(response, "IDEMPOTENCY_IN_FLIGHT")
            detail = None if expected else f"{response.status_code} {response.text[:300]}"
            self.seen.note(str(response.status_code), detail)
            time.sleep(RETRY_PAUSE_S)


def _is_problem(response: httpx.Response, code: str) -> bool:
    return response.headers.get("content-type", "").startswith("application/problem+json") and (
        response.json().get("code") == code
    )


@dataclass
class JobFate:
    job_id: str
    state: str
    reason: str | None
    worker: str | None
    terminal_events: int
    runs: int  # lines in its marker file


def fates(settings: Settings, load: LoadClients) -> dict[str, JobFate]:
    """Every accepted job's state, terminal event count and marker-file runs, read from the database."""
    ids = {uuid.UUID(a.job_id): tag for tag, a in load.seen.accepted.items()}
    terminal = [s.value for s in TERMINAL]
    with session_scope(settings) as session:
        jobs = session.scalars(select(Job).where(Job.id.in_(ids))).all()
        ended = dict(
            session.execute(
                select(JobEvent.job_id, func.count())
                .where(JobEvent.job_id.in_(ids), JobEvent.to_state.in_(terminal))
                .group_by(JobEvent.job_id)
            ).all()
        )
    found = {}
    for job in jobs:
        tag = ids[job.id]
        marker = load.marker(tag)
        runs = marker.read_text().count("\n") if marker.exists() else 0
        found[tag] = JobFate(
            str(job.id), job.state, job.termination_reason, job.worker, int(ended.get(job.id, 0)), runs
        )
    return found


def unfinished(settings: Settings, job_ids: list[str]) -> int:
    terminal = [s.value for s in TERMINAL]
    with session_scope(settings) as session:
        query = select(func.count()).where(
            Job.id.in_([uuid.UUID(j) for j in job_ids]), Job.state.not_in(terminal)
        )
        return int(session.scalar(query) or 0)


def state_counts(settings: Settings, job_ids: list[str]) -> dict[str, int]:
    with session_scope(settings) as session:
        query = (
            select(Job.state, func.count())
            .where(Job.id.in_([uuid.UUID(j) for j in job_ids]))
            .group_by(Job.state)
        )
        return {state: int(count) for state, count in session.execute(query)}
