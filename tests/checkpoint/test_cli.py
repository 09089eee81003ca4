"""`eyas doctor` and `eyas fix-keys` as a user runs them: real processes, exit codes, JSON output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def eyas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_doctor_flags_a_speculators_draft_and_fix_keys_makes_it_loadable(
    speculators_draft: Path, target_dir: Path, tmp_path: Path
) -> None:
    before = eyas(
        "doctor", str(speculators_draft), "--target", str(target_dir), "--sglang-version", "0.5.11", "--json"
    )
    assert before.returncode == 1, before.stdout
    codes = {f["code"] for f in json.loads(before.stdout)["findings"] if f["severity"] == "error"}
    assert "TENSOR_IGNORED" in codes
    dest = tmp_path / "sglang-draft"
    fixed = eyas(
        "fix-keys",
        str(speculators_draft),
        str(dest),
        "--target",
        str(target_dir),
        "--sglang-version",
        "0.5.11",
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "renamed" in fixed.stdout
    after = eyas("doctor", str(dest), "--target", str(target_dir), "--sglang-version", "0.5.11")
    assert after.returncode == 0, after.stdout
    again = eyas("fix-keys", str(speculators_draft), str(dest), "--target", str(target_dir))
    assert again.returncode == 2
    assert "exists" in again.stderr


def test_doctor_refuses_a_bad_version_string_and_missing_folders(tmp_path: Path) -> None:
    assert eyas("doctor", str(tmp_path / "nope")).returncode == 1
    bad = eyas("doctor", str(tmp_path), "--sglang-version", "0.5;rm -rf /")
    assert bad.returncode == 2
    assert eyas("fix-keys", str(tmp_path / "nope"), str(tmp_path / "out")).returncode == 2
    assert not (tmp_path / "out").exists()
