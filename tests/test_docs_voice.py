"""The docs, README and code comments read as a product's, not as a development diary.

A measurement's story (which run, which session, what the clock said, how much machine time was left) belongs
in CHANGELOG.md; a design decision and its evidence in docs/design/; a figure, with its hardware, versions,
date and command, in docs/benchmarks.md's tables. Everywhere else the text states the fact. This test fails on
the kinds of diary reference that used to fill the docs: run and session numbers, "GPU run", issue numbers,
clock times, machine budgets, and dates in prose.

Each pattern is tried on planted diary lines and on product text it must leave alone
(test_a_planted_diary_line_is_caught, test_product_text_is_not_flagged): a check that cannot fail is no check.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Prose the project publishes. CHANGELOG.md is where history goes, so it is not read.
DOC_FILES = ("README.md", "CONTRIBUTING.md")
DOC_FOLDERS = ("docs",)
HISTORY_FILES = ("CHANGELOG.md",)

# Code whose comments and docstrings are read (Python comments and docstrings, shell comments).
CODE_FOLDERS = ("app", "contract", "drafting", "workers", "cli", "scripts", "bench", "testsupport")

# A measurement's date is data where the figure is recorded: a row of a benchmarks table.
DATED_TABLES = ("docs/benchmarks.md",)

_ORDINALS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
    "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth"
)
# A number after "run" that counts something ("run 2 rounds", "had run 7 s") is not a run's number.
_COUNTED = (
    r"(?!\s*(?:s|ms|min|minutes|seconds|hours|steps|epochs|rounds|times|jobs|tokens|requests|ranks|%|x|×)\b)"
)

DIARY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # (a range is read whole: "run 7–8 s" counts seconds, so "run 7" alone must not match inside it)
    ("a run's number", re.compile(r"\bruns? \d+(?:\s*[–-]\s*\d+)?(?!\d|\s*[–-]\s*\d)" + _COUNTED, re.I)),
    ("a run's ordinal", re.compile(rf"\b(?:{_ORDINALS}) (?:GPU )?run\b", re.IGNORECASE)),
    ("a GPU run", re.compile(r"\bGPU runs?\b", re.IGNORECASE)),
    (
        "a working session",
        re.compile(
            r"\bsessions? \d+|\b(?:GPU|device|next|previous|earlier|later|last|lent) sessions?\b"
            r"|\bsession['’]s (?:budget|device|machine|time|calls?)\b|\bthis session\b",
            re.IGNORECASE,
        ),
    ),
    ("an issue's number", re.compile(r"\bissues? \d+|(?<![\w&/#])#\d+\b", re.IGNORECASE)),
    (
        "a note on how we work",
        re.compile(r"\bother engineers\b|\bthe lead (?:measures|records)\b|\bmy error\b", re.I),
    ),
    (
        "a clock time",
        re.compile(r"\b[0-2]?\d:[0-5]\d(?::[0-5]\d)?(?:\s*[–-]\s*[0-2]?\d:[0-5]\d)?\s*(?:UTC)?\b"),
    ),
    (
        "a machine budget",
        re.compile(
            r"\bdevice[- ](?:time|minutes|budget|seconds)\b|\bbudget_left\b|\bbudget left\b|\bmachine time\b"
            r"|\bs of (?:the )?budget\b",
            re.IGNORECASE,
        ),
    ),
)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# A result file's name may carry a date; the name is a path, not prose.
RESULT_PATH = re.compile(r"bench/results/[\w.\-/]+")


def diary_references(text: str, *, dates_allowed: bool = False) -> list[str]:
    """What in `text` reads as a diary: each pattern's name and the words it matched."""
    text = RESULT_PATH.sub("", text)
    found = [f"{name}: {m.group(0)!r}" for name, pattern in DIARY_PATTERNS for m in pattern.finditer(text)]
    if not dates_allowed:
        found += [f"a date: {m.group(0)!r}" for m in DATE.finditer(text)]
    return found


def markdown_findings(path: Path, relative: str) -> Iterator[str]:
    dated_table = relative in DATED_TABLES
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        dates_allowed = dated_table and line.lstrip().startswith("|")
        for finding in diary_references(line, dates_allowed=dates_allowed):
            yield f"{relative}:{number}: {finding}"


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring in a Python source."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    for offset, line in enumerate(body[0].value.value.splitlines()):
                        yield body[0].lineno + offset, line


def shell_prose(source: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(source.splitlines(), 1):
        if "#" in line and not line.startswith("#!"):
            yield number, line[line.index("#") :]


def code_findings(path: Path, relative: str) -> Iterator[str]:
    source = path.read_text(encoding="utf-8")
    prose = python_prose(source) if path.suffix == ".py" else shell_prose(source)
    for number, text in prose:
        for finding in diary_references(text):
            yield f"{relative}:{number}: {finding}"


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def doc_paths() -> Iterator[Path]:
    yield from (ROOT / name for name in DOC_FILES)
    for folder in DOC_FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.md"))


def code_paths() -> Iterator[Path]:
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            relative = _relative(path)
            if path.suffix in (".py", ".sh") and "__pycache__" not in relative:
                yield path


def test_docs_and_readme_read_as_product_not_diary() -> None:
    findings = [f for path in doc_paths() for f in markdown_findings(path, _relative(path))]
    assert not findings, "diary references (history goes to CHANGELOG.md, decisions to docs/design/):\n" + (
        "\n".join(findings)
    )


def test_code_comments_state_facts_not_history() -> None:
    findings = [f for path in code_paths() for f in code_findings(path, _relative(path))]
    assert not findings, "comments citing history instead of the fact:\n" + "\n".join(findings)


def test_the_history_file_is_the_one_place_left_unread() -> None:
    read = {_relative(path) for path in doc_paths()}
    assert set(HISTORY_FILES).isdisjoint(read)
    assert (ROOT / "README.md").relative_to(ROOT).as_posix() in read
    assert any(name.startswith("docs/design/") for name in read)
    assert any(_relative(path).startswith("bench/") for path in code_paths())


PLANTED = (
    "Measured in GPU run 12 on the H200.",
    "The sixteenth run served 2.02 (run 16).",
    "Runs 13–15 trained the same drafter.",
    "Session 16, 16:46–17:13 UTC, a Firecracker host.",
    "Next session: serve both drafts on the held-out set.",
    "Fixed for issue 14; see #15 too.",
    "It started at 12:49 and was killed.",
    "Given back with 382 s of device time left.",
    "| C | the pipeline | 427 s | 1,137 s of the budget |",
    "budget_left was 612 s after call D",
    "The machine was shared with other engineers' test runs; the lead measures the GPU host.",
    "The default changed on 2026-12-04 after the sweep.",
)

PRODUCT_TEXT = (
    "A dry run renders the command and starts nothing.",
    "Run the suite with `bash scripts/test.sh`.",
    "The sweep runs 2 rounds; a job that had run 7 s is reaped; their tasks had run 7–8 s.",
    "The service flushes the session and never commits; the request's session commits.",
    "Near-ties are judged within the scoring budget of 120 s.",
    "The profile gives each kernel's time per step.",
    "speculators' loss mask (`models/eagle3/metrics.py:41-43`) and SpecForge#534.",
    "Raw results: bench/results/h200_train-step_eyas-0.1.0_sglang-0.5.14_2026-12-04.json.",
)


@pytest.mark.parametrize("line", PLANTED)
def test_a_planted_diary_line_is_caught(line: str) -> None:
    assert diary_references(line), line


@pytest.mark.parametrize("line", PRODUCT_TEXT)
def test_product_text_is_not_flagged(line: str) -> None:
    assert diary_references(line) == []


def test_a_planted_line_in_a_doc_and_in_a_comment_fails_the_scan(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text("# Page\n\nThe train stage picks the best epoch.\nGPU run 16 measured it (issue 15).\n")
    assert {f.split(": ", 1)[0] for f in markdown_findings(doc, "docs/page.md")} == {"docs/page.md:4"}

    code = tmp_path / "module.py"
    code.write_text(
        '"""A module.\n\nSee the run 12 record."""\n\nX = "run 12 in a string is data, not a comment"\n'
        "Y = 1  # 0.968 of the yardstick, GPU run 16\n"
    )
    assert {f.split(": ", 1)[0] for f in code_findings(code, "drafting/module.py")} == {
        "drafting/module.py:3",
        "drafting/module.py:6",
    }

    script = tmp_path / "run.sh"
    script.write_text("#!/usr/bin/env bash\necho 'run 3'  # the fifth run's layout\n")
    assert len(list(code_findings(script, "scripts/run.sh"))) == 1


def test_a_date_is_data_only_in_a_benchmarks_table_row(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("| H200 | 0.968 | 2026-12-04 | `python bench/bench_train.py` |\nMeasured 2026-12-04.\n")
    assert [f.split(": ", 1)[0] for f in markdown_findings(page, "docs/benchmarks.md")] == [
        "docs/benchmarks.md:2"
    ]
    assert len(list(markdown_findings(page, "docs/training.md"))) == 2
