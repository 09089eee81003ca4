"""The "accepted means kept" scenario: steady submissions while Redis, PostgreSQL, the API and a worker fail.

Used by tests/reliability/test_accepted_means_kept.py, which asserts on it and reports its figures.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from app.core.db import session_scope
from app.models.job import Job, JobEvent
from tests.reliability._load import JobFate, LoadClients, fates, state_counts, unfinished
from tests.reliability._services import PrivatePostgres, PrivateRedis, wait_until
from tests.reliability._stack import Stack

HOSTS = ["rel-a", "rel-b"]


@dataclass
class Window:
    """A fault: when it began, when the service was back, and what recovery took."""

    fault: str
    down_at: datetime
    up_at: datetime | None = None
    recovery_s: dict[str, float] = field(default_factory=dict)


@dataclass
class FaultReport:
    total: int
    clients: int
    accepted: int = 0
    completed: int = 0
    worker_lost: int = 0  # failed WORKER_LOST on the worker the scenario killed: the documented outcome
    wrongly_lost: int = 0  # failed WORKER_LOST on a live worker: must be 0 (see wrongly_lost_jobs)
    wrongly_lost_by_phase: dict[str, int] = field(default_factory=dict)
    wrongly_lost_jobs: list[dict[str, Any]] = field(default_factory=list)  # the first 50, with their phase
    lost: int = 0
    duplicated: int = 0
    other_failures: int = 0
    jobs_in_db: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    unexpected_responses: list[str] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    worker_restarts_by_supervisor: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_fault_scenario(
    stack: Stack, *, total: int, clients: int, outage_s: float = 3.0, settle_s: float = 3.0
) -> tuple[FaultReport, LoadClients, dict[str, JobFate], str]:
    """Returns the report, the clients, every accepted job's fate, and the killed worker's name."""
    started = time.monotonic()
    stack.start_api()
    for host in HOSTS:
        stack.start_worker(host)
    spread_s = settle_s + 4 * (outage_s + settle_s)
    load = LoadClients(
        stack.url, stack.headers, stack.root / "markers", total=total, clients=clients,
        spread_s=spread_s, hosts=HOSTS,
    ).start()  # fmt: skip
    report = FaultReport(total=total, clients=clients)
    supervisor = Supervisor(stack).start()
    try:
        killed_worker = _inject_faults(stack, report, supervisor, outage_s=outage_s, settle_s=settle_s)
        load.join(timeout_s=240)
        _wait_all_ended(stack, [a.job_id for a in load.seen.accepted.values()])
    finally:
        supervisor.stop()
    report.worker_restarts_by_supervisor = supervisor.restarted
    found = fates(stack.settings, load)
    _recovery_from_db(stack, load, found, report.windows)
    _account(report, stack, load, found, killed_worker)
    report.duration_s = round(time.monotonic() - started, 1)
    return report, load, found, killed_worker


def _inject_faults(
    stack: Stack, report: FaultReport, supervisor: Supervisor, *, outage_s: float, settle_s: float
) -> str:
    """Redis, then PostgreSQL, then the API, then a worker, `settle_s` apart (the load runs meanwhile: the
    schedule is the scenario); returns the killed worker."""
    time.sleep(settle_s)  # the schedule under test
    report.windows.append(
        _restart(stack.redis, "redis", "redis restart (messages lost: no persistence)", outage_s)
    )
    time.sleep(settle_s)  # the schedule under test
    report.windows.append(_restart(stack.pg, "postgres", "postgresql restart (fast shutdown)", outage_s))
    time.sleep(settle_s)  # the schedule under test
    report.windows.append(_restart_api(stack))
    time.sleep(settle_s)  # the schedule under test
    with supervisor.paused():
        killed_window, killed_worker = _kill_worker(stack, HOSTS[0])
    report.windows.append(killed_window)
    return killed_worker


def _wait_all_ended(stack: Stack, job_ids: list[str]) -> None:
    timeout_s = max(300.0, 1.0 * len(job_ids))  # a loaded 2-core machine runs about a selftest job a second
    try:
        wait_until(lambda: unfinished(stack.settings, job_ids) == 0, timeout_s, "every job ending", 0.5)
    except TimeoutError:
        raise AssertionError(f"jobs still not ended: {state_counts(stack.settings, job_ids)}") from None


class Supervisor(threading.Thread):
    """Starts a worker again when it exits on its own, as `restart: unless-stopped` does in docker-compose.

    A worker that exits by itself is a finding (see test_outages.py); the restarts are reported, and they
    keep the scenario measuring what it is about: whether accepted jobs are kept.
    """

    def __init__(self, stack: Stack) -> None:
        super().__init__(name="worker-supervisor", daemon=True)
        self.stack = stack
        self.restarted: list[str] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def start(self) -> Supervisor:  # type: ignore[override]
        super().start()
        return self

    def run(self) -> None:
        while not self._halt.wait(0.5):
            with self._lock:
                for host, worker in list(self.stack.workers.items()):
                    if not worker.alive():
                        reason = "crash" if "Unrecoverable error" in worker.log() else "exit"
                        self.restarted.append(f"{host}: {reason} at {datetime.now(UTC):%H:%M:%S}")
                        self.stack.start_worker(host)

    def paused(self) -> threading.Lock:
        return self._lock

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=70)


def _restart(service: PrivateRedis | PrivatePostgres, name: str, label: str, outage_s: float) -> Window:
    """Stop a service, leave it down for outage_s, start it; the window records how long the start took."""
    window = Window(label, datetime.now(UTC))
    service.stop()
    time.sleep(outage_s)  # the outage under test
    window.recovery_s[f"{name}_start"] = round(service.start(), 3)
    window.up_at = datetime.now(UTC)
    return window


def _restart_api(stack: Stack) -> Window:
    assert stack.api is not None
    window = Window("api kill -9 and restart", datetime.now(UTC))
    stack.api.kill9()
    began = time.monotonic()
    stack.start_api()
    window.recovery_s["api_healthy"] = round(time.monotonic() - began, 3)
    window.up_at = datetime.now(UTC)
    return window


def _kill_worker(stack: Stack, host: str) -> tuple[Window, str]:
    """kill -9 the worker process (its running jobs' process groups survive it), then start it again."""
    old = stack.workers[host]
    window = Window(f"worker {host} kill -9 and restart", datetime.now(UTC))
    killed_worker = _worker_name(stack, host)
    old.kill9()
    began = time.monotonic()
    stack.start_worker(host)
    window.recovery_s["worker_registered"] = round(time.monotonic() - began, 3)
    window.up_at = datetime.now(UTC)
    return window, killed_worker


def _worker_name(stack: Stack, host: str) -> str:
    from app.hosts import repository as hosts_repo

    with session_scope(stack.settings) as session:
        row = hosts_repo.get(session, host)
        assert row is not None
        return str(row.worker)


def _recovery_from_db(
    stack: Stack, load: LoadClients, found: dict[str, JobFate], windows: list[Window]
) -> None:
    """Per window: the first job accepted after the service came back, and (broker) when the jobs accepted
    while it was down were claimed."""
    accepted_at = sorted(a.at for a in load.seen.accepted.values())
    with session_scope(stack.settings) as session:
        started = dict(
            session.execute(
                select(Job.id, Job.started_at).where(
                    Job.id.in_([uuid.UUID(f.job_id) for f in found.values()])
                )
            ).all()
        )
    for window in windows:
        if window.up_at is None:
            continue
        after = [t for t in accepted_at if t >= window.up_at]
        if after:
            window.recovery_s["first_accept_after_up"] = round((after[0] - window.up_at).total_seconds(), 3)
        sent_while_down = [
            a for a in load.seen.accepted.values() if window.down_at <= a.sent_at < window.up_at
        ]
        during = [uuid.UUID(a.job_id) for a in sent_while_down]
        window.recovery_s["sent_while_down"] = len(during)
        if sent_while_down:
            slowest = max((a.at - a.sent_at).total_seconds() for a in sent_while_down)
            window.recovery_s["slowest_answer_while_down"] = round(slowest, 3)
        claimed = [started[j] for j in during if started.get(j) is not None]
        if claimed:
            last = max(claimed)
            window.recovery_s["last_claim_after_up"] = round(
                max(0.0, (last - window.up_at).total_seconds()), 3
            )


def _account(
    report: FaultReport, stack: Stack, load: LoadClients, found: dict[str, JobFate], killed_worker: str
) -> None:
    report.accepted = len(load.seen.accepted)
    report.statuses = dict(load.seen.statuses)
    report.unexpected_responses = list(load.seen.unexpected)
    reasons = Counter((f.state, f.reason) for f in found.values())
    report.completed = reasons[("succeeded", "SUCCEEDED")]
    # Lost with the killed worker: its job, failed once it was killed. Any other WORKER_LOST (a live worker's
    # job, or the killed worker's before it was killed) is wrong.
    killed_at = report.windows[-1].down_at
    lost = _when_lost(stack, [f for f in found.values() if f.reason == "WORKER_LOST"], report.windows)
    wrongly = [
        j for j in lost if not (j["worker"] == killed_worker and datetime.fromisoformat(j["at"]) >= killed_at)
    ]
    report.worker_lost = len(lost) - len(wrongly)
    report.wrongly_lost = len(wrongly)
    report.wrongly_lost_jobs = wrongly[:50]
    report.wrongly_lost_by_phase = dict(Counter(j["phase"] for j in wrongly))
    report.other_failures = len(found) - report.completed - report.worker_lost - report.wrongly_lost
    report.lost = report.accepted - sum(1 for f in found.values() if f.terminal_events == 1)
    report.duplicated = sum(1 for f in found.values() if f.runs > 1)
    with session_scope(stack.settings) as session:
        report.jobs_in_db = int(session.scalar(select(func.count()).select_from(Job)) or 0)


def phase_at(windows: list[Window], at: datetime) -> tuple[str, float | None]:
    """The fault phase in effect at `at`: (phase, seconds since that fault's service was back, if it was)."""
    phase, since_up = "before any fault", None
    for window in windows:
        if at < window.down_at:
            break
        if window.up_at is None or at < window.up_at:
            phase, since_up = f"{window.fault}: down", None
        else:
            phase, since_up = f"{window.fault}: after", (at - window.up_at).total_seconds()
    return phase, since_up


def _when_lost(stack: Stack, jobs: list[JobFate], windows: list[Window]) -> list[dict[str, Any]]:
    """For each job failed WORKER_LOST: when (UTC, ISO text) and in which fault phase it was failed, its
    worker, and what the reaper saw (its message names the last heartbeat)."""
    ids = [uuid.UUID(f.job_id) for f in jobs]
    with session_scope(stack.settings) as session:
        rows = session.execute(
            select(JobEvent.job_id, JobEvent.at, JobEvent.from_state, JobEvent.message, Job.worker)
            .join(Job, Job.id == JobEvent.job_id)
            .where(JobEvent.job_id.in_(ids), JobEvent.reason == "WORKER_LOST")
            .order_by(JobEvent.at)
        ).all()
    found = []
    for job_id, at, from_state, message, worker in rows:
        phase, since_up = phase_at(windows, at)
        found.append(
            {
                "job_id": str(job_id),
                "at": at.isoformat(),
                "phase": phase,
                "s_after_up": None if since_up is None else round(since_up, 2),
                "from_state": from_state,
                "worker": worker,
                "message": message,
            }
        )
    return found
