"""Fixtures for the generate tests: the constructed chat target, prompt files, reference-engine params."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contract.params.generate import GenerateParams
from tests._torch_threads import one_torch_thread  # noqa: F401 - an autouse fixture for this folder
from tests.conftest import free_port
from tests.generation.targets import chatty_target


@pytest.fixture(scope="session")
def chatty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chatty_target(tmp_path_factory.mktemp("chatty") / "target")


def write_prompts(path: Path, rows: list[Any]) -> Path:
    """JSONL with each row as JSON, or as the given text (a str row is written as it is)."""
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def generate_params(target: Path, output: Path, **values: Any) -> GenerateParams:
    """Params for a CPU run on the reference engine (debug log: it logs every request it receives)."""
    engine = {
        "engine": "reference",
        "port": free_port(),
        "log_level": "debug",
        "env": {"OMP_NUM_THREADS": "1"},
        "ready_timeout_s": 120,
        "stop_grace_s": 5,
        **values.pop("engine", {}),
    }
    base: dict[str, Any] = {"target": str(target), "output": str(output), "engine": engine}
    return GenerateParams.model_validate({**base, **values})


def received(lines: list[str]) -> list[dict[str, Any]]:
    """The requests the reference engine logged (`Receive: {...}`), in the order it received them."""
    marker = "Receive: "
    return [json.loads(line.split(marker, 1)[1]) for line in lines if marker in line]


def output_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
