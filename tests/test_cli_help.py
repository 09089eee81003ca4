"""What `eyas --help` tells a newcomer agrees with what the commands do: every read command takes --json, the
pipeline's help names every step the template runs, eyas compare says its exit codes, eyas demo writes where
`eyas up` lets jobs read, and eyas logs --json prints one JSON object per line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.core.config import Settings
from app.pipelines.templates import EAGLE3_STEPS
from cli.main import app
from tests.conftest import ROOT, WorkerProcess
from tests.test_cli import eyas

Headers = dict[str, str]
READ_COMMANDS = [
    ["status"],
    ["wait"],
    ["logs"],
    ["hosts"],
    ["compare"],
    ["pipeline", "status"],
    ["token", "list"],
    ["doctor"],
    ["launch"],
]


def help_of(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())  # rich wraps and boxes the text: compare words, not lines


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_every_read_command_takes_json(command: list[str]) -> None:
    assert "--json" in help_of(*command)


def test_the_pipeline_help_names_every_step_the_template_runs() -> None:
    text = help_of("pipeline")
    assert " → ".join(EAGLE3_STEPS) in text, "every step, none lost to rich's [markup]"


def test_compare_and_wait_say_their_exit_codes() -> None:
    compare = help_of("compare")
    for code in ("Exit 0 compared", "1 --require not met", "2 bad ids", "5 API unreachable"):
        assert code in compare
    assert "Exit 0 succeeded, 1 failed, 3 cancelled, 4 timed out, 5 API unreachable" in help_of("wait")


def test_demo_writes_beside_the_data_dir_by_default(tmp_path: Path) -> None:
    """In the working directory (a root `eyas up` allows), never inside the data dir, where the path rules
    refuse every job output."""
    data_dir = tmp_path / "data"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "EYAS_DATA_DIR": str(data_dir),
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    made = subprocess.run(
        [sys.executable, "-m", "cli.main", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert made.returncode == 0, made.stderr
    demo = tmp_path / ".eyas-demo"
    spec = json.loads((demo / "pipeline.json").read_text())
    assert Path(spec["target"]).parent == demo
    assert Path(spec["workdir"]).is_relative_to(demo)
    assert not data_dir.exists() or not any(data_dir.rglob("pipeline.json"))
    assert "must lie under the worker host's allowed roots" in made.stdout
    assert ".eyas-demo in the working directory" in help_of("demo")


def test_logs_json_prints_one_object_per_line(
    settings: Settings, admin: Headers, api_server: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("gpu-a")
    token = admin["Authorization"].split()[1]
    job = json.loads(
        eyas(
            settings, api_server, token, "submit", "selftest", "--host", "gpu-a", "-p", "lines=3", "--json"
        ).stdout
    )
    assert eyas(settings, api_server, token, "wait", job["id"], "--timeout", "60").returncode == 0
    printed = eyas(settings, api_server, token, "logs", job["id"], "--json")
    assert printed.returncode == 0, printed.stderr
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    assert [line["text"] for line in lines if not line["text"].startswith("[eyas]")] == [
        f"line {i}" for i in range(3)
    ]
    assert all(set(line) == {"seq", "ts", "stream", "text"} for line in lines)
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)
    followed = eyas(settings, api_server, token, "logs", job["id"], "--json", "-f", "--tail", "1")
    assert followed.returncode == 0, "-f exits with the job's outcome"
    assert json.loads(followed.stdout.splitlines()[-1])["seq"] == lines[-1]["seq"]
