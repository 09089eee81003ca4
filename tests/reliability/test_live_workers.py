"""A job on a live worker is never failed as lost: the worker heartbeats it from its claim until its end is
stored, however long storing takes.

The mechanism behind most `wrongly_lost` jobs of the fault scenario (test_accepted_means_kept.py): the
heartbeat stopped with the job's process, and the job's end was stored only after its last log lines, a
progress event and the outcome had gone through a database that was slow (a loaded machine: seconds) or
down (a restart). Past the lost-after period the reapers failed those jobs WORKER_LOST on workers that were
alive. Here the database takes the job's last log lines only after three lost-after periods.
"""

from __future__ import annotations

import httpx
from sqlalchemy import text

from app.core.db import session_scope
from tests.reliability._services import wait_until
from tests.reliability._stack import Stack
from tests.reliability.test_outages import submit, wait_terminal
from testsupport.timing import throughout


def test_a_job_whose_end_is_slow_to_store_is_not_lost_while_its_worker_lives(stack: Stack) -> None:
    stack.start_api()  # its maintenance loop reaps, and so does the worker's
    worker = stack.start_worker("rel-a")
    hold_s = stack.settings.lost_after_s * 3
    with httpx.Client(base_url=stack.url, headers=stack.headers, timeout=60) as http:
        job_id = submit(http, "rel-a", lines=1, sleep_s=1.0)

        def first_line_stored() -> bool:
            return "line 0" in http.get(f"/v1/jobs/{job_id}/logs", params={"format": "text"}).text

        wait_until(first_line_stored, 30, "the job's first log line stored")
        with session_scope(stack.settings) as session:
            # Writes to log_line wait (reads do not): the process ends meanwhile, and its last lines, and
            # so its end, cannot be stored until the lock goes.
            session.execute(text("LOCK TABLE log_line IN EXCLUSIVE MODE"))
            # Held for three lost-after periods: had its heartbeat stopped with its process, a reaper would
            # have failed the job within the first. It must stay running the whole time.
            throughout(
                lambda: http.get(f"/v1/jobs/{job_id}").json()["state"] == "running",
                for_s=hold_s,
                what="running while its end waits to be stored",
                every_s=0.2,
            )
        job = wait_terminal(http, job_id)
    assert worker.alive(), worker.log()[-2000:]
    assert (job["state"], job["termination_reason"]) == ("succeeded", "SUCCEEDED"), job
