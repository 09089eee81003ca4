"""A device, a FIFO or an oversized file where a config or weights belong: refused at once, naming the path.

Before, `eyas doctor DRAFT --target /dev/zero` read /dev/zero until memory ran out (14 GB seen), and a FIFO
named config.json blocked until a writer came. Each call runs in a thread with a deadline, so a regression
fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drafting.checkpoint import CheckpointError, diagnose, fix_checkpoint
from drafting.findings import Severity

DEADLINE_S = 60.0  # generous for a loaded CI host; the calls take well under a second of their own


def _promptly(call: Callable[[], Any]) -> Any:
    """call()'s result or exception, or a test failure if it has not returned by the deadline."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    assert not worker.is_alive(), f"still running after {DEADLINE_S} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _unreadable(report: Any, code: str, path: Path | str) -> str:
    findings = [f for f in report.findings if f.code == code and f.severity is Severity.ERROR]
    assert findings, report.render_text()
    assert str(path) in findings[0].message
    return findings[0].message


def test_doctor_with_dev_zero_as_target(clean_draft: Path) -> None:
    report = _promptly(lambda: diagnose(clean_draft, target=Path("/dev/zero")))
    assert "character device" in _unreadable(report, "TARGET_UNREADABLE", "/dev/zero")


def test_fix_keys_with_dev_zero_as_target(clean_draft: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as caught:
        _promptly(lambda: fix_checkpoint(clean_draft, tmp_path / "out", target=Path("/dev/zero")))
    assert "/dev/zero" in caught.value.message
    assert not (tmp_path / "out").exists()


def test_fifo_config_json(clean_draft: Path, tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    shutil.copytree(clean_draft, draft)
    (draft / "config.json").unlink()
    os.mkfifo(draft / "config.json")
    report = _promptly(lambda: diagnose(draft))
    assert "FIFO" in _unreadable(report, "UNREADABLE", draft / "config.json")


def test_fifo_target_config(clean_draft: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    os.mkfifo(target / "config.json")
    report = _promptly(lambda: diagnose(clean_draft, target=target))
    assert "FIFO" in _unreadable(report, "TARGET_UNREADABLE", target / "config.json")


def test_fifo_weights(clean_draft: Path, tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    shutil.copytree(clean_draft, draft)
    (draft / "model.safetensors").unlink()
    os.mkfifo(draft / "model.safetensors")
    report = _promptly(lambda: diagnose(draft))
    assert "FIFO" in _unreadable(report, "UNREADABLE", draft / "model.safetensors")


def test_oversized_config_json(clean_draft: Path, tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    shutil.copytree(clean_draft, draft)
    os.truncate(draft / "config.json", 64 * 1024 * 1024)  # sparse: nothing is written
    report = _promptly(lambda: diagnose(draft))
    assert "eyas reads at most" in _unreadable(report, "UNREADABLE", draft / "config.json")
