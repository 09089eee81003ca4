"""Schemathesis against the app's own OpenAPI document with a valid admin token: no 5xx, and every success
response matches the document. Error responses are checked too and kept apart: the document does not
describe eyas's problem+json errors yet (see the strict xfail below). The default run generates a few cases
per operation; the slow variant at least 1,000 in all."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from app.core.config import Settings
from app.main import create_app

Headers = dict[str, str]
DOCUMENT_CHECKS = [response_schema_conformance, content_type_conformance]


@dataclass
class FuzzRun:
    cases: int = 0
    operations: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    # The database is up throughout, so a 503 DATABASE_UNAVAILABLE is a value PostgreSQL refused (NUL, an
    # integer past 64 bits): finding 4 of docs/reliability.md, tested in test_hostile_input.py and
    # counted apart here, so that any other 5xx fails the run.
    database_refused_503s: int = 0
    success_mismatches: list[str] = field(default_factory=list)
    error_mismatches: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "operations": self.operations,
            "statuses": dict(sorted(self.statuses.items())),
            "server_errors": self.server_errors[:20],
            "database_refused_503s": self.database_refused_503s,
            "success_mismatches": self.success_mismatches[:20],
            "error_mismatches": dict(self.error_mismatches),
        }


def _failure(case: Any, response: Any, checks: list[Any], admin: Headers) -> str | None:
    try:
        case.validate_response(response, checks=checks, headers=admin)
    except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - every check failure is a finding to list
        first = str(exc).strip().splitlines()
        return f"{case.operation.label} -> {response.status_code}: {' '.join(first[:6])[:300]}"
    return None


def fuzz(settings: Settings, admin: Headers, examples_per_operation: int) -> FuzzRun:
    app = create_app(settings.model_copy(update={"auth_failures_per_minute": 1_000_000}))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=admin)
    run = FuzzRun()

    def check(case: Any) -> None:
        response = case.call(headers=admin)
        run.cases += 1
        run.statuses[response.status_code] += 1
        if response.status_code == 503 and response.json().get("code") == "DATABASE_UNAVAILABLE":
            run.database_refused_503s += 1
        elif (failure := _failure(case, response, [not_a_server_error], admin)) is not None:
            run.server_errors.append(failure)
        elif (failure := _failure(case, response, DOCUMENT_CHECKS, admin)) is not None:
            if response.status_code < 400:
                run.success_mismatches.append(failure)
            else:
                run.error_mismatches[f"{case.operation.label} -> {response.status_code}"] += 1

    for result in schema.get_all_operations():
        operation = result.ok()
        run.operations += 1
        hypothesis_settings(
            max_examples=examples_per_operation,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(given(case=operation.as_strategy())(lambda case: check(case)))()
    return run


def publish(run: FuzzRun, tmp_path: Path) -> None:
    text = json.dumps(run.summary(), indent=1)
    print(text)
    (tmp_path / "fuzz.json").write_text(text)
    if target := os.environ.get("EYAS_FUZZ_REPORT"):
        Path(target).write_text(text)


def test_fuzzing_finds_no_server_error_and_no_success_response_off_the_schema(
    settings: Settings, admin: Headers, tmp_path: Path
) -> None:
    run = fuzz(settings, admin, examples_per_operation=6)
    publish(run, tmp_path)
    assert run.cases >= 120, run.summary()
    assert run.server_errors == []
    assert run.success_mismatches == []


def test_error_responses_match_the_openapi_document(settings: Settings, admin: Headers) -> None:
    run = fuzz(settings, admin, examples_per_operation=2)
    assert run.error_mismatches == {}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fuzzing_over_a_thousand_cases(settings: Settings, admin: Headers, tmp_path: Path) -> None:
    run = fuzz(settings, admin, examples_per_operation=40)
    publish(run, tmp_path)
    assert run.cases >= 1000, run.summary()
    assert run.server_errors == []
    assert run.success_mismatches == []
