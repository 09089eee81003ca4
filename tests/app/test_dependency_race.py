"""A dependency that ends while a job depending on it is being submitted (real PostgreSQL, two sessions):
the end waits for the submit's commit and then queues the new job. Read without a hold, the dependency's end
found no dependent yet and the job, judged pending on the state read before, waited forever (a worker test
caught one such job still pending after 60 s)."""

from __future__ import annotations

import threading
import uuid

from app.core.config import Settings
from app.core.db import session_factory, session_scope
from app.core.security import Principal, Scope
from app.jobs import service as jobs_service
from app.jobs.schemas import JobCreate
from app.jobs.states import JobState
from tests.app.test_jobs_api import register_host
from tests.app.test_pipelines_api import run_step
from testsupport.timing import throughout

PRINCIPAL = Principal(token_id="test", name="test", scopes=frozenset({Scope.ADMIN}))


def selftest(depends_on: list[uuid.UUID] | None = None) -> JobCreate:
    return JobCreate(kind="selftest", params={"lines": 1}, host="gpu-a", depends_on=depends_on or [])


def test_a_dependency_ending_during_the_submit_queues_the_new_job(settings: Settings) -> None:
    register_host(settings, "gpu-a")
    with session_scope(settings) as session:
        first, _ = jobs_service.submit_job(session, settings, spec=selftest(), principal=PRINCIPAL)
        first_id = first.id
    submitting = session_factory(settings)()
    try:
        second, _ = jobs_service.submit_job(
            submitting, settings, spec=selftest([first_id]), principal=PRINCIPAL
        )
        assert second.state == JobState.PENDING  # judged on `first` still queued
        ended = threading.Thread(target=run_step, args=(settings, str(first_id)))
        ended.start()
        # the end of `first` waits on the submit's hold; a worker's end takes milliseconds when it does not
        throughout(ended.is_alive, for_s=1.0, what="the dependency's end waits for the submit")
        submitting.commit()
        ended.join(timeout=30)
        assert not ended.is_alive()
    finally:
        submitting.close()
    with session_scope(settings) as session:
        stored = jobs_service.get_job(session, second.id)
        assert stored.state == JobState.QUEUED
