"""Outputs the API refuses at submit time, against the real API and PostgreSQL: a dest or output that is,
holds or lies in eyas's data directory, an allowed root, eyas's install, or a path another job that has not
ended declared. Each refusal is a 422 PATH_NOT_ALLOWED naming the rule, and nothing is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from contract.paths import install_paths
from tests.app.test_jobs_api import job_count, register_host, submit

Headers = dict[str, str]


def fix_keys(source: Path | str, dest: Path | str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "fix_keys",
        "host": "gpu-a",
        "params": {"source": str(source), "dest": str(dest), **extra},
    }


def refused(client: TestClient, admin: Headers, body: dict[str, Any], *words: str) -> str:
    before = job_count(client, admin)
    response = client.post("/v1/jobs", json=body, headers=admin)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["code"] == "PATH_NOT_ALLOWED"
    for word in words:
        assert word in problem["detail"], problem["detail"]
    assert job_count(client, admin) == before
    return str(problem["detail"])


@pytest.fixture
def root(settings: Settings) -> Path:
    """The allowed root of the tests' host: it holds the data directory too (tests/conftest.py)."""
    root = settings.allowed_roots[0]
    assert settings.data_dir.is_relative_to(root)
    register_host(settings, "gpu-a", roots=[str(root)])
    return root


def test_an_output_in_or_over_the_data_directory_is_refused(
    client: TestClient, admin: Headers, settings: Settings, root: Path
) -> None:
    data = settings.data_dir
    refused(client, admin, fix_keys(root / "draft", data, force=True), "is eyas's data directory")
    refused(client, admin, fix_keys(root / "draft", data / "jobs"), "lies inside eyas's data directory")
    extract = {
        "target": str(root / "t"),
        "data": str(root / "d.jsonl"),
        "output": str(data / "x"),
        "device": "cpu",
    }
    refused(client, admin, {"kind": "extract", "host": "gpu-a", "params": extract}, "data directory")
    refused(client, admin, submit_body("selftest", marker_file=str(data / "eyas.sqlite")), "data directory")


def test_an_allowed_root_itself_is_never_an_output(
    client: TestClient, admin: Headers, settings: Settings, tmp_path: Path
) -> None:
    other = tmp_path / "other-root"
    register_host(settings, "gpu-a", roots=[str(settings.allowed_roots[0]), str(other)])
    refused(
        client, admin, fix_keys(other.parent / "x" / "draft", other, force=True), "outside the allowed roots"
    )
    source = settings.allowed_roots[0] / "draft"
    detail = refused(client, admin, fix_keys(source, other, force=True), "allowed root")
    assert str(other) in detail
    submit(client, admin, **fix_keys(other / "draft", other / "sglang"))  # a folder under it is fine


def test_an_output_inside_the_install_is_refused(
    client: TestClient, admin: Headers, settings: Settings
) -> None:
    package = Path(next(p for p in install_paths() if p.endswith("/drafting")))
    checkout, source = package.parent, settings.allowed_roots[0] / "draft"
    register_host(settings, "gpu-a", roots=[str(checkout), str(settings.allowed_roots[0])])
    refused(client, admin, fix_keys(source, package / "evil"), "lies inside eyas's install")
    refused(client, admin, fix_keys(source, package, force=True), "is eyas's install")
    refused(client, admin, fix_keys(source, checkout, force=True), "allowed root")


def test_an_output_over_another_unfinished_jobs_paths_is_refused(
    client: TestClient, admin: Headers, root: Path
) -> None:
    """No worker runs, so the first job stays queued: its paths are taken until it ends."""
    first = submit(client, admin, **fix_keys(root / "a" / "draft", root / "a" / "sglang"))
    taken = [
        (root / "a" / "sglang", "is"),  # the same output
        (root / "a" / "sglang" / "inner", "lies inside"),
        (root / "a", "contains"),  # replacing it would take both of the first job's folders
        (root / "a" / "draft", "is"),  # the first job's input
    ]
    for dest, how in taken:
        detail = refused(
            client, admin, fix_keys(root / "b" / "draft", dest, force=True), how, str(first["id"])
        )
        assert "has not ended" in detail
    submit(client, admin, **fix_keys(root / "a" / "draft", root / "a" / "sglang-2"))  # reading it is fine

    client.post(f"/v1/jobs/{first['id']}/cancel", headers=admin)  # ended: its paths are free again
    submit(client, admin, **fix_keys(root / "b" / "draft", root / "a" / "sglang", force=True))


def submit_body(kind: str, **params: Any) -> dict[str, Any]:
    return {"kind": kind, "host": "gpu-a", "params": params}
