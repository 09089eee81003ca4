"""Where jobs write, through the real API, PostgreSQL, Redis and `eyas worker` processes, on real files.

- A symlink under the allowed root is flipped, as fast as a thread can, between the real folder inside the
  root and a link to a folder outside every root, while a few hundred jobs write through it (selftest
  markers, fix_keys checkpoints): each job pins the folder when it uses it, so it writes inside or fails
  PATH_NOT_ALLOWED, and nothing ever appears outside.
- `force` replaces a folder only when eyas made it: a user's folder makes the job fail BAD_INPUT and stays
  as it was; a folder an earlier fix_keys job wrote is replaced whole, its marker naming the new job.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from drafting.outputs import MARKER
from tests.checkpoint.conftest import folder_digest
from tests.conftest import WorkerProcess

pytestmark = pytest.mark.timeout(900)

Headers = dict[str, str]
SELFTEST_JOBS = 240
FIX_KEYS_JOBS = 24
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): each name always exists."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def post(client: TestClient, admin: Headers, kind: str, **params: Any) -> str:
    response = client.post("/v1/jobs", json={"kind": kind, "host": "gpu-a", "params": params}, headers=admin)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def ended(client: TestClient, admin: Headers, job_ids: list[str], timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    done = []
    for job_id in job_ids:
        left = max(1.0, deadline - time.monotonic())
        job = client.get(f"/v1/jobs/{job_id}/wait", params={"timeout": min(left, 60)}, headers=admin).json()
        while not job["terminal"] and time.monotonic() < deadline:
            job = client.get(f"/v1/jobs/{job_id}/wait", params={"timeout": 30}, headers=admin).json()
        assert job["terminal"], job
        done.append(job)
    return done


@pytest.fixture
def flipping(settings: Settings, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """root/inside (a real folder) and root/link (a symlink to outside/, a folder outside every root),
    their names swapped by a thread until "stop" is called: root/link is the real folder half the time."""
    root = settings.allowed_roots[0] / f"race-{uuid.uuid4().hex[:8]}"
    inside, link, outside = root / "inside", root / "link", tmp_path / "outside"
    inside.mkdir(parents=True)
    outside.mkdir()
    link.symlink_to(outside)
    stop = threading.Event()
    swaps = [0]

    def flip() -> None:
        while not stop.is_set():
            exchange(inside, link)
            swaps[0] += 1
            os.sched_yield()

    thread = threading.Thread(target=flip, daemon=True)

    def stopped() -> int:
        stop.set()
        thread.join(10)
        assert not thread.is_alive()
        return swaps[0]

    thread.start()
    yield {"root": root, "inside": inside, "link": link, "outside": outside, "stop": stopped}
    stopped()


def test_a_flipping_symlink_never_gets_a_job_to_write_outside_the_roots(
    client: TestClient,
    admin: Headers,
    start_worker: Callable[..., WorkerProcess],
    clean_draft: Path,
    flipping: dict[str, Any],
) -> None:
    start_worker("gpu-a")
    source = flipping["root"] / "draft"
    shutil.copytree(clean_draft, source)
    link = flipping["link"]
    jobs = {
        post(client, admin, "selftest", marker_file=str(link / f"m-{i}"), lines=0): f"m-{i}"
        for i in range(SELFTEST_JOBS)
    }
    jobs |= {
        post(client, admin, "fix_keys", source=str(source), dest=str(link / f"d-{i}")): f"d-{i}"
        for i in range(FIX_KEYS_JOBS)
    }

    results = ended(client, admin, list(jobs), timeout_s=780)
    assert flipping["stop"]() > 1000  # the link kept flipping while the jobs ran

    assert list(flipping["outside"].iterdir()) == []
    real = next(p for p in (flipping["inside"], link) if not p.is_symlink())
    succeeded = [job for job in results if job["state"] == "succeeded"]
    failed = [job for job in results if job["state"] != "succeeded"]
    other = [job["message"] for job in failed if job["termination_reason"] != "PATH_NOT_ALLOWED"]
    assert {(job["state"], job["termination_reason"]) for job in failed} <= {
        ("failed", "PATH_NOT_ALLOWED")
    }, other
    assert all("outside the host's allowed roots" in job["message"] for job in failed), failed[:3]
    assert succeeded  # jobs that pinned root/link while it was the real folder
    assert failed  # and jobs that pinned it while it led outside
    written = {jobs[job["id"]] for job in succeeded}
    assert {p.name for p in real.iterdir()} == written
    fixed = [name for name in written if name.startswith("d-")]
    assert all((real / name / MARKER).is_file() for name in fixed)


def test_force_replaces_only_a_folder_eyas_made(
    client: TestClient,
    admin: Headers,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    clean_draft: Path,
) -> None:
    start_worker("gpu-a")
    root = settings.allowed_roots[0] / f"force-{uuid.uuid4().hex[:8]}"
    source, users = root / "draft", root / "users-folder"
    shutil.copytree(clean_draft, source)
    users.mkdir()
    (users / "results.csv").write_text("a,b\n1,2\n")
    (users / "nested").mkdir()
    (users / "nested" / "notes.txt").write_text("keep me")
    before = folder_digest(users)

    (refused,) = ended(
        client, admin, [post(client, admin, "fix_keys", source=str(source), dest=str(users), force=True)], 120
    )
    assert (refused["state"], refused["termination_reason"]) == ("failed", "BAD_INPUT")
    assert "eyas did not make it" in refused["message"]
    assert folder_digest(users) == before
    assert sorted(p.name for p in root.iterdir()) == ["draft", "users-folder"]  # no leftovers beside it

    ours = root / "sglang"
    first_id = post(client, admin, "fix_keys", source=str(source), dest=str(ours))
    (first,) = ended(client, admin, [first_id], 120)
    assert first["state"] == "succeeded", first
    assert json.loads((ours / MARKER).read_text())["job_id"] == first_id
    (ours / "stale.txt").write_text("from before")
    second_id = post(client, admin, "fix_keys", source=str(source), dest=str(ours), force=True)
    (second,) = ended(client, admin, [second_id], 120)
    assert second["state"] == "succeeded", second
    assert json.loads((ours / MARKER).read_text()) | {"kind": "fix_keys", "job_id": second_id} == json.loads(
        (ours / MARKER).read_text()
    )
    assert not (ours / "stale.txt").exists()
    assert (ours / "config.json").is_file()
    assert sorted(p.name for p in root.iterdir()) == ["draft", "sglang", "users-folder"]
