"""The process runner, on real processes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from drafting import proc


def collect() -> tuple[list[tuple[str, str]], proc.LineSink]:
    lines: list[tuple[str, str]] = []
    return lines, lambda stream, text: lines.append((stream, text))


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_streams_both_streams_line_by_line_and_returns_the_exit_code() -> None:
    lines, sink = collect()
    result = proc.run_command(
        py("import sys; print('a'); print('b', file=sys.stderr); print('c'); sys.exit(3)"), on_line=sink
    )
    assert result.exit_code == 3
    assert not result.ok
    assert ("stdout", "a") in lines
    assert ("stdout", "c") in lines
    assert ("stderr", "b") in lines
    assert [t for s, t in lines if s == "stdout"] == ["a", "c"]


def test_environment_is_exactly_what_was_passed() -> None:
    lines, sink = collect()
    proc.run_command(
        py("import os; print(sorted(k for k in os.environ if k.startswith('EYAS_T')))"),
        on_line=sink,
        env={"EYAS_T1": "x", "PATH": "/usr/bin"},
    )
    assert lines == [("stdout", "['EYAS_T1']")]


def test_no_shell_metacharacter_is_ever_interpreted(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    lines, sink = collect()
    result = proc.run_command(["/bin/echo", f"hello; touch {target}", "$(id)"], on_line=sink)
    assert result.exit_code == 0
    assert lines == [("stdout", f"hello; touch {target} $(id)")]
    assert not target.exists()


def test_broken_output_is_stored_safely() -> None:
    code = (
        "import sys; w = sys.stdout.buffer.write;"
        "w(b'bad \\xff\\xfe utf8\\n'); w(b'nul\\x00byte\\n'); w(b'\\x1b[31mred\\x1b[0m\\n');"
        "w(b'x' * 300000 + b'\\n'); w(b'tail without newline')"
    )
    lines, sink = collect()
    proc.run_command(py(code), on_line=sink, max_line_bytes=1000)
    texts = [t for _, t in lines]
    assert texts[0] == "bad \ufffd\ufffd utf8"
    assert texts[1] == "nul\ufffdbyte"
    assert texts[2] == "\x1b[31mred\x1b[0m"  # stored as-is; renderers escape it
    assert texts[3].startswith("x" * 1000)
    assert "line truncated: 299000 more bytes" in texts[3]
    assert texts[4] == "tail without newline"


def test_timeout_ends_the_whole_group_including_grandchildren() -> None:
    code = (
        "import subprocess, sys, time;"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        "print(child.pid, flush=True); time.sleep(60)"
    )
    lines, sink = collect()
    started = time.monotonic()
    result = proc.run_command(py(code), on_line=sink, timeout_s=1.5, grace_s=1)
    assert result.timed_out
    assert time.monotonic() - started < 10
    grandchild = int(lines[0][1])
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE


def test_cancel_sends_sigterm_first_and_the_program_can_clean_up() -> None:
    code = (
        "import signal, sys, time\n"
        "def bye(*_):\n    print('cleaning up', flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    lines, sink = collect()
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    result = proc.run_command(py(code), on_line=sink, cancel=cancel, grace_s=5)
    assert result.cancelled
    assert ("stdout", "cleaning up") in lines


def test_sigkill_after_the_grace_period_when_sigterm_is_ignored() -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('x', flush=True); time.sleep(60)"
    )
    _lines, sink = collect()
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    result = proc.run_command(py(code), on_line=sink, cancel=cancel, grace_s=1)
    assert result.cancelled
    assert result.exit_code == -9
    assert time.monotonic() - started < 8


def test_on_start_reports_pid_group_and_start_time() -> None:
    seen: list[proc.StartedProcess] = []
    _, sink = collect()
    result = proc.run_command(py("print(1)"), on_line=sink, on_start=seen.append)
    assert seen[0].pid == result.pid == seen[0].pgid
    assert seen[0].create_time > 0


def test_terminate_group_refuses_a_reused_pid() -> None:
    popen = proc.spawn(py("import time; time.sleep(30)"))
    try:
        wrong_start_time = psutil.Process(popen.pid).create_time() - 100
        assert proc.terminate_group(popen.pid, grace_s=1, expected_create_time=wrong_start_time) is False
        assert popen.poll() is None
        assert proc.group_alive(popen.pid, psutil.Process(popen.pid).create_time())
    finally:
        assert proc.terminate_group(popen.pid, grace_s=1, popen=popen)
    assert not proc.group_alive(popen.pid)


def test_a_start_time_read_across_a_boot_time_rounding_is_the_same_process() -> None:
    popen = proc.spawn(py("import time; time.sleep(30)"))
    try:
        started = psutil.Process(popen.pid).create_time()
        # /proc/stat's btime is whole seconds derived from the wall clock: a later read may add one
        assert proc.process_alive(popen.pid, started + 1.0)
        assert proc.process_alive(popen.pid, started - 1.0)
        assert not proc.process_alive(popen.pid, started + 5.0), "a start 5 s off is another process"
    finally:
        assert proc.terminate_group(popen.pid, grace_s=1, popen=popen)


def test_missing_program_and_bad_argv() -> None:
    _, sink = collect()
    with pytest.raises(proc.CommandNotFound, match="no-such-program"):
        proc.run_command(["/no/such/no-such-program"], on_line=sink)
    with pytest.raises(ValueError, match="argv"):
        proc.run_command([], on_line=sink)
    with pytest.raises(ValueError, match="argv"):
        proc.run_command("echo hi", on_line=sink)  # type: ignore[arg-type]


@pytest.mark.parametrize("die_with_parent", [True, False])
def test_a_child_started_to_die_with_its_parent_ends_when_the_parent_is_killed(die_with_parent: bool) -> None:
    """A server a stage starts lives in its own process group, out of reach of the stage's group kill; with
    die_with_parent the kernel ends it when the stage is SIGKILLed (without it lives on: the control)."""
    sleeper = "[sys.executable, '-c', 'import time; time.sleep(60)']"
    parent_code = (
        "import sys, time; from drafting import proc; "
        f"child = proc.start({sleeper}, die_with_parent={die_with_parent}); "
        "print(child.started.pid, flush=True); time.sleep(60)"
    )
    repo = Path(__file__).parents[2]
    parent = psutil.Popen(py(parent_code), stdout=subprocess.PIPE, cwd=repo)
    assert parent.stdout is not None
    with parent.stdout:
        child = psutil.Process(int(parent.stdout.readline()))
    parent.kill()
    parent.wait(10)
    try:
        child.wait(5)
        ended = True
    except psutil.TimeoutExpired:
        ended = False
    finally:
        if child.is_running():
            child.kill()
    assert ended is die_with_parent
