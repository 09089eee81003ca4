"""The dashboard's log rendering (ansi.js) shows bidirectional-text controls as visible escapes, so a log
line holding U+202E is displayed as it is, never reversed. Runs the module itself in Node."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ANSI_JS = Path(__file__).resolve().parents[2] / "app/dashboard/static/js/ansi.js"
BIDI = [
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
]


def segments(tmp_path: Path, lines: list[str]) -> list[list[dict[str, str]]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    module = tmp_path / "ansi.mjs"
    module.write_text(ANSI_JS.read_text())
    script = (
        f"import {{ ansiSegments }} from {json.dumps(str(module))};\n"
        f"console.log(JSON.stringify({json.dumps(lines)}.map((l) => ansiSegments(l))));\n"
    )
    run = subprocess.run(
        [node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60, check=True
    )
    result: list[list[dict[str, str]]] = json.loads(run.stdout)
    return result


def test_bidi_controls_in_a_log_line_are_shown_as_escapes(tmp_path: Path) -> None:
    lines = [f"saved /runs/a{c}gpj.exe" for c in BIDI] + ["\x1b[31mred \u202eexe.txt\x1b[0m", "plain עברית"]
    shown = segments(tmp_path, lines)
    for char, line in zip(BIDI, shown, strict=False):
        text = "".join(s["text"] for s in line)
        assert not any(c in text for c in BIDI), (char, text)
        assert text == f"saved /runs/a\\u{ord(char):04x}gpj.exe"
    assert shown[len(BIDI)] == [{"text": "red \\u202eexe.txt", "className": "ansi-red"}]
    assert shown[-1] == [{"text": "plain עברית", "className": ""}]  # right-to-left text itself is kept
