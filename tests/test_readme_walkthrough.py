"""The README's walkthrough, run as written: every bash block of its "A walkthrough with curl" section,
command by command in one bash process, against `eyas up` on the embedded default (SQLite database and broker
in .eyas, one local worker) started from a folder laid out as a checkout is (`.venv/bin/eyas`, `.eyas/`).

The commands come from README.md itself, so the README cannot drift from what is tested. A command fails the
test when it exits non-zero (curl runs with --fail-with-body, bash with -euo pipefail), when it prints nothing
although it is not an assignment, when a line it prints is `null`, or when a variable it assigns is empty or
`null`; the failure names the README line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from drafting import proc
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
BASH = "/bin/bash"
README = ROOT / "README.md"
SECTION = "## A walkthrough with curl"
STEP = "@@readme-step"
EMPTY = "@@readme-empty"
END = "@@readme-end"
ASSIGNS = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")
READS = re.compile(r"^read\s+((?:[A-Za-z_][A-Za-z0-9_]*\s*)+)<")
LOOP_ASSIGNS = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)
TO_FILE = re.compile(r">\s*\S+\s*$")


@dataclass(frozen=True)
class Command:
    """One complete shell command of the README (several lines when continued or quoted)."""

    line: int  # README line where it starts
    text: str

    def assigned(self) -> list[str]:
        """The variables this command sets: they must not be empty or null afterwards."""
        first = self.text.splitlines()[0]
        if match := READS.match(first):
            return match.group(1).split()
        if first.startswith("export "):
            return [m.split("=", 1)[0] for m in first.removeprefix("export ").split() if "=" in m]
        if match := ASSIGNS.match(first):
            return [match.group(1)]
        if first.startswith("for "):
            return LOOP_ASSIGNS.findall(self.text)
        return []

    def prints(self) -> bool:
        """Whether it must print something: every command but assignments and writes to a file."""
        return not self.assigned() and not TO_FILE.search(self.text.split("#", 1)[0])


def walkthrough_blocks(readme: str) -> list[tuple[int, str]]:
    """The section's ```bash blocks with the README line each starts on."""
    lines = readme.splitlines()
    start = lines.index(SECTION)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    blocks, current, first = [], None, 0
    for number in range(start, end):
        line = lines[number]
        if current is None and line.strip() == "```bash":
            current, first = [], number + 2
        elif current is not None and line.strip() == "```":
            blocks.append((first, "\n".join(current)))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def _complete(text: str) -> bool:
    """bash's own parser decides where a command ends (open quotes, loops, a trailing pipe); it accepts a
    trailing backslash at the end of its input, so the caller checks that one itself."""
    return subprocess.run([BASH, "-n"], input=text, text=True, capture_output=True).returncode == 0


def split_commands(first_line: int, block: str) -> list[Command]:
    commands, pending, start = [], [], first_line
    for offset, line in enumerate(block.splitlines()):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            start = first_line + offset
        pending.append(line)
        if not line.rstrip().endswith("\\") and _complete("\n".join(pending)):
            commands.append(Command(start, "\n".join(pending)))
            pending = []
    assert not pending, f"README line {start}: a command that never ends: {pending}"
    return commands


def script_of(commands: list[Command]) -> str:
    parts = ["set -euo pipefail"]
    for number, command in enumerate(commands):
        parts.append(f"printf '\\n{STEP} {number}\\n'")
        parts.append(command.text)
        for name in command.assigned():
            parts.append(
                f'[[ -n "${{{name}:-}}" && "${{{name}}}" != null ]] || {{ echo "{EMPTY} {name}"; exit 97; }}'
            )
    parts.append(f"printf '\\n{END}\\n'")
    return "\n".join(parts) + "\n"


def outputs_by_command(output: str) -> dict[int, str]:
    found: dict[int, str] = {}
    current = None
    for line in output.splitlines():
        if line.startswith(STEP):
            current = int(line.split()[1])
            found[current] = ""
        elif current is not None and line != END:
            found[current] += line + "\n"
    return found


def test_the_walkthrough_is_split_into_whole_commands() -> None:
    commands = [
        c for first, block in walkthrough_blocks(README.read_text()) for c in split_commands(first, block)
    ]
    texts = [c.text for c in commands]
    assert any(t.startswith(".venv/bin/eyas demo") for t in texts)
    loop = next(c for c in commands if c.text.startswith("for "))
    assert loop.text.rstrip().endswith("done")
    assert loop.assigned() == ["S"]
    continued = next(c for c in commands if c.text.startswith("JOB="))
    assert continued.text.count("\n") >= 2
    assert continued.assigned() == ["JOB"]
    reads = next(c for c in commands if c.text.startswith("read "))
    assert reads.assigned() == ["A", "B"]
    assert next(c for c in commands if c.text.startswith("export ")).assigned() == ["EYAS_URL", "EYAS_TOKEN"]
    assert not next(c for c in commands if c.text.startswith("echo")).prints(), (
        "a write to a file prints nothing"
    )
    for command in commands:  # the README names real paths: none under /data, /models or /tmp
        assert not re.search(r"(?<![\w.])/(data|models|tmp)/", command.text), command


def _run(block: str) -> tuple[subprocess.CompletedProcess[str], list[Command], dict[int, str]]:
    commands = split_commands(1, block)
    ran = subprocess.run([BASH, "-c", script_of(commands)], capture_output=True, text=True, timeout=30)
    return ran, commands, outputs_by_command(ran.stdout)


def test_the_runner_catches_a_failure_an_empty_or_null_value_and_a_silent_command() -> None:
    ran, _, outputs = _run("echo one\nfalse | cat\necho never")
    assert ran.returncode != 0, "pipefail: a failing command in a pipe stops the walkthrough"
    assert max(outputs) == 1
    ran, _, _ = _run('X=$(echo \'{"id": null}\' | jq -r .id)\necho "$X"')
    assert ran.returncode == 97
    assert f"{EMPTY} X" in ran.stdout
    ran, _, _ = _run("read A B < <(echo only-one)")
    assert f"{EMPTY} B" in ran.stdout
    ran, commands, outputs = _run("true\necho null")
    assert ran.returncode == 0
    assert commands[0].prints()
    assert not outputs[0].strip(), "the test fails a command that should print and did not"
    assert "null" in [line.strip() for line in outputs[1].splitlines()]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A folder laid out as a checkout after scripts/setup.sh: .venv is the environment running this test."""
    venv = Path(sys.prefix)
    assert (venv / "bin" / "eyas").exists(), f"{venv}/bin/eyas is missing: pip install -e . into it"
    folder = tmp_path / "checkout"
    folder.mkdir()
    (folder / ".venv").symlink_to(venv)
    (tmp_path / "home").mkdir()
    return folder


def _env(checkout: Path, port: int) -> dict[str, str]:
    """The user's shell: no EYAS_* settings (the embedded default), this tree's code first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EYAS_")}
    env.update(
        HOME=str(checkout.parent / "home"),
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        EYAS_URL=f"http://127.0.0.1:{port}",
        SERVE_PORT=str(free_port()),
    )
    return env


def _wait_until_up(
    url: str, up: subprocess.Popen[bytes], token: Path, log: Path, timeout_s: float = 120
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert up.poll() is None, f"eyas up exited {up.returncode}:\n{log.read_text()}"
        try:
            if token.exists() and httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"eyas up did not come up in {timeout_s:.0f} s:\n{log.read_text()}")


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(none)"


@pytest.mark.timeout(1800)
def test_the_readme_walkthrough_runs_as_written(checkout: Path) -> None:
    commands = [
        c for first, block in walkthrough_blocks(README.read_text()) for c in split_commands(first, block)
    ]
    assert len(commands) > 20
    port = free_port()
    env = _env(checkout, port)
    up_log = checkout.parent / "up.log"
    # the README's "To run eyas yourself" line, on a free port
    up = proc.spawn(
        [".venv/bin/eyas", "up", "--port", str(port), "--data-dir", ".eyas"],
        env=env,
        cwd=checkout,
        output=up_log,
    )
    try:
        _wait_until_up(env["EYAS_URL"], up, checkout / ".eyas" / "admin.token", up_log)
        said = up_log.read_text()
        assert f"roots: {checkout}, {checkout / '.eyas'}  (job paths must lie under these" in said, said
        script = checkout.parent / "walkthrough.sh"
        script.write_text(script_of(commands))
        ran = subprocess.run(
            [BASH, str(script)], cwd=checkout, env=env, capture_output=True, text=True, timeout=1700
        )
        outputs = outputs_by_command(ran.stdout)
        last = max(outputs, default=0)
        failed = commands[last]
        context = (
            f"README line {failed.line}:\n{failed.text}\n--- its output:\n{outputs.get(last, '')}"
            f"\n--- stderr:\n{ran.stderr[-3000:]}\n--- eyas up:\n{_tail(up_log)}"
            f"\n--- worker:\n{_tail(checkout / '.eyas' / 'worker.log')}"
        )
        assert ran.returncode == 0, f"exit {ran.returncode} at {context}"
        assert EMPTY not in ran.stdout, context
        assert END in ran.stdout, context
        for number, command in enumerate(commands):
            printed = outputs[number]
            where = f"README line {command.line}: {command.text}\n--- output:\n{printed}"
            if command.prints():
                assert printed.strip(), f"printed nothing: {where}"
            assert "null" not in [line.strip() for line in printed.splitlines()], f"printed null: {where}"
        _assert_what_it_left(env["EYAS_URL"], (checkout / ".eyas" / "admin.token").read_text().strip())
    finally:
        proc.terminate_group(up.pid, grace_s=15, popen=up)


def _assert_what_it_left(url: str, token: str) -> None:
    """Beyond each line's own output: the state the walkthrough leaves, read back through the API."""
    headers = {"Authorization": f"Bearer {token}"}
    pipeline = httpx.get(f"{url}/v1/pipelines?limit=1", headers=headers).json()["items"][0]
    assert (pipeline["state"], pipeline["retries"]) == ("succeeded", 1)
    benchmarks = httpx.get(f"{url}/v1/benchmarks", headers=headers).json()["items"]
    assert len(benchmarks) == 2
    assert all(b["deployable"] for b in benchmarks)
    verdicts = [b["summary"]["gate"]["verdict"] for b in benchmarks]
    assert all(v.startswith("no speedup required at ") for v in verdicts), verdicts
    deadline = time.monotonic() + 60  # the stopped server's launch job ends once its process group has
    while time.monotonic() < deadline:
        servers = httpx.get(f"{url}/v1/servers?limit=1", headers=headers).json()["items"]
        if servers[0]["state"] == "stopped":
            break
        time.sleep(0.5)
    assert servers[0]["state"] == "stopped", servers[0]
    assert (Path(servers[0]["draft"]) / "config.json").exists()
