"""The deployment files: the compose file validates with Docker Compose itself (no Docker engine runs on
these machines, so nothing is started), and both files keep the promises the docs make."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="docker-compose not installed (test.sh installs it)"
)
def test_compose_file_validates_with_docker_compose() -> None:
    result = subprocess.run(["docker-compose", "config", "-q"], cwd=ROOT, capture_output=True, text=True)  # noqa: S607
    assert result.returncode == 0, result.stderr


def test_compose_services_health_checks_volumes_and_gpu_reservation() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "api", "worker"}
    assert all("healthcheck" in s for s in services.values())
    assert "eyas db upgrade" in " ".join(services["api"]["command"])  # migrations before the API starts
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia"
    assert "gpu" in devices[0]["capabilities"]
    assert "EYAS_WORKER_HOST_NAME" in services["worker"]["environment"]
    assert {"pgdata", "eyasdata", "eyaslogs"} <= set(compose["volumes"])


def test_dockerfile_is_slim_and_runs_as_a_non_root_user() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users == ["eyas"]


def test_the_image_copies_every_package_the_project_installs() -> None:
    # The layout moved code into contract/ and drafting/; an image without them installs an eyas that cannot
    # import its own stages.
    import tomllib

    includes = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {pattern.rstrip("*") for pattern in includes["include"]}
    copied = {
        line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")
    }
    assert packages <= copied, packages - copied
