"""drafting/userfiles.py against real special files: /dev/zero, a FIFO, a folder, a sparse oversized file, a
symlink to /dev/zero, an over-long JSONL line. Each read must fail at once with the path in the message;
the timeouts are there so a regression that blocks on a FIFO or reads /dev/zero fails instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drafting.serving.launch.model_configs import read_config
from drafting.serving.prompts import load_prompts
from drafting.userfiles import (
    Cap,
    UserFileError,
    append_user_text,
    check_model_folder,
    check_regular,
    iter_user_lines,
    open_user_file,
    read_user_bytes,
    read_user_json,
    read_user_json_object,
    read_user_text,
)
from tests.conftest import ROOT
from tests.ml.guard import run_guarded

pytestmark = pytest.mark.timeout(20)

SMALL_CAP = 1024


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _sparse(path: Path, size: int = 10 * 1024**3) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)  # 10 GB apparent, no blocks used
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


# (name of the special file, how to make it, the words the error must hold)
SPECIALS: list[tuple[str, Callable[[Path], Path], str]] = [
    ("dev_zero", lambda _tmp: Path("/dev/zero"), "character device"),
    ("fifo", lambda tmp: _fifo(tmp / "pipe.json"), "FIFO"),
    ("folder", lambda tmp: _folder(tmp / "dir.json"), "folder"),
    ("sparse", lambda tmp: _sparse(tmp / "huge.json"), "eyas reads at most"),
    ("zero_link", lambda tmp: _zero_link(tmp / "link.json"), "character device"),
]

READERS: list[tuple[str, Callable[[Path], Any]]] = [
    ("check_regular", lambda p: check_regular(p, SMALL_CAP, "spec")),
    ("read_user_bytes", lambda p: read_user_bytes(p, SMALL_CAP, "spec")),
    ("read_user_text", lambda p: read_user_text(p, SMALL_CAP, "spec")),
    ("read_user_json", lambda p: read_user_json(p, SMALL_CAP, "spec")),
    ("read_user_json_object", lambda p: read_user_json_object(p, SMALL_CAP, "spec")),
    ("iter_user_lines", lambda p: list(iter_user_lines(p, SMALL_CAP, "spec"))),
    ("open_user_file", lambda p: open_user_file(p, SMALL_CAP, "spec").__enter__()),
]


@pytest.mark.parametrize(("special", "make", "words"), SPECIALS, ids=[s[0] for s in SPECIALS])
@pytest.mark.parametrize(("reader_name", "reader"), READERS, ids=[r[0] for r in READERS])
def test_every_reader_refuses_special_files_at_once(
    tmp_path: Path,
    special: str,
    make: Callable[[Path], Path],
    words: str,
    reader_name: str,
    reader: Callable[[Path], Any],
) -> None:
    path = make(tmp_path)
    started = time.monotonic()
    outcome = run_guarded(lambda: reader(path))  # a regression fails in a child, never fills memory here
    assert time.monotonic() - started < 5, f"{reader_name} took its time on {special}"
    assert outcome.raised == "UserFileError", outcome
    assert str(path) in outcome.message
    assert words in outcome.message
    assert outcome.path == str(path)
    assert outcome.problem == ("too_large" if special == "sparse" else "not_regular")


def test_regular_files_read_as_before(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text('{"a": [1, 2]}')
    assert read_user_json(spec, SMALL_CAP) == {"a": [1, 2]}
    assert read_user_bytes(spec, SMALL_CAP) == b'{"a": [1, 2]}'
    assert check_regular(spec, SMALL_CAP) == 13
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert read_user_bytes(empty, SMALL_CAP) == b""
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * SMALL_CAP)
    assert len(read_user_bytes(exact, SMALL_CAP)) == SMALL_CAP
    exact.write_bytes(b"x" * (SMALL_CAP + 1))
    with pytest.raises(UserFileError, match="1,025 bytes"):
        read_user_bytes(exact, SMALL_CAP)


def test_proc_files_of_size_zero_are_read_to_the_cap() -> None:
    assert b"Name:" in read_user_bytes("/proc/self/status", Cap.CONFIG)  # st_size 0, content all the same
    with pytest.raises(UserFileError, match="grew past 16 bytes"):
        read_user_bytes("/proc/self/status", 16)


def test_missing_bad_json_and_wrong_type_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(UserFileError, match="spec not found") as missing:
        read_user_json(tmp_path / "nope.json", what="spec")
    assert missing.value.problem == "missing"
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(
        UserFileError, match=r"bad.json: spec is not valid JSON \(.*line 1 column 2"
    ) as invalid:
        read_user_json(bad, what="spec")
    assert invalid.value.problem == "invalid"
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    with pytest.raises(UserFileError, match="must hold a JSON object, not list"):
        read_user_json_object(listed, what="spec")
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(UserFileError, match="not UTF-8"):
        read_user_json(latin)


def test_one_over_long_jsonl_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"ok": 1}\n' + '{"x": "' + "y" * 200 + '"}\n' + '{"ok": 2}\n')
    lines = iter_user_lines(data, Cap.DATASET, "conversation data", line_cap=100)
    assert next(lines) == (1, '{"ok": 1}')
    with pytest.raises(UserFileError, match=r"data.jsonl: conversation data line 2 is longer than 100 bytes"):
        next(lines)
    # A line of exactly the cap (plus its newline) is fine, and so is a last line without one.
    data.write_text("a" * 100 + "\n" + "b" * 100)
    assert [n for n, _ in iter_user_lines(data, line_cap=100)] == [1, 2]
    data.write_text("a" * 101)
    with pytest.raises(UserFileError, match="line 1 is longer"):
        list(iter_user_lines(data, line_cap=100))


def test_a_model_folder_with_a_special_file_among_its_files_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 16)
    (model / "README.md").write_text("hi")
    (model / "original").mkdir()
    check_model_folder(model)  # a normal folder passes

    for name, make in (
        ("config.json", lambda p: _fifo(p)),
        ("tokenizer.json", lambda p: _zero_link(p)),
        ("model.safetensors", lambda p: _fifo(p)),
        ("generation_config.json", lambda p: _sparse(p)),
        ("notes", lambda p: _fifo(p)),  # a name nothing reads: still no reason to be a FIFO
        ("additional_chat_templates/tool.jinja", lambda p: _fifo(p)),
    ):
        case = tmp_path / name.replace("/", "_")
        (case / "additional_chat_templates").mkdir(parents=True)
        (case / "config.json").write_text("{}")
        target = case / name
        target.unlink(missing_ok=True)
        make(target)
        with pytest.raises(UserFileError) as caught:
            check_model_folder(case, "target model folder")
        assert str(target) in str(caught.value), name

    with pytest.raises(UserFileError, match="target is a FIFO"):
        check_model_folder(_fifo(tmp_path / "target"), "target")
    with pytest.raises(UserFileError, match="target is a file, not a folder"):
        check_model_folder(model / "config.json", "target")
    with pytest.raises(UserFileError, match="target not found"):
        check_model_folder(tmp_path / "missing", "target")


def test_append_never_waits_on_a_fifo_and_never_writes_a_device(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    append_user_text(marker, "one\n")
    append_user_text(marker, "two\n")
    assert marker.read_text() == "one\ntwo\n"
    with pytest.raises(UserFileError, match="FIFO"):
        append_user_text(_fifo(tmp_path / "pipe"), "x\n", "marker file")
    with pytest.raises(UserFileError, match="character device"):
        append_user_text(_zero_link(tmp_path / "zero"), "x\n", "marker file")


@pytest.mark.parametrize(("special", "make", "words"), SPECIALS, ids=[s[0] for s in SPECIALS])
def test_prompt_sets_refuse_special_files(
    tmp_path: Path, special: str, make: Callable[[Path], Path], words: str
) -> None:
    path = make(tmp_path)
    outcome = run_guarded(lambda: load_prompts(path))
    assert outcome.raised == "UserFileError", outcome
    assert words in outcome.message
    assert str(path) in outcome.message


def test_prompt_set_with_an_over_long_line(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    with path.open("w") as handle:
        handle.write(json.dumps({"text": "short"}) + "\n")
        handle.write(json.dumps({"text": "x" * (Cap.LINE + 10)}) + "\n")
    with pytest.raises(UserFileError, match="prompt file line 2 is longer than"):
        load_prompts(path)


def test_launch_config_reads_refuse_special_files_but_tolerate_missing_ones(tmp_path: Path) -> None:
    folder = tmp_path / "draft"
    folder.mkdir()
    assert read_config(folder) is None  # missing: the launch checks report it their own way
    (folder / "config.json").write_text("{broken")
    assert read_config(folder) is None
    (folder / "config.json").write_text('{"num_hidden_layers": 2}')
    assert read_config(folder) == {"num_hidden_layers": 2}
    (folder / "config.json").unlink()
    _fifo(folder / "config.json")
    with pytest.raises(UserFileError, match="config.json is a FIFO"):
        read_config(folder)
    (folder / "config.json").unlink()
    _zero_link(folder / "config.json")
    with pytest.raises(UserFileError, match="character device"):
        read_config(folder)


@pytest.mark.parametrize("special", ["fifo", "dev_zero"])
def test_cli_spec_file_that_is_special_exits_2_with_the_path(tmp_path: Path, special: str) -> None:
    spec = _fifo(tmp_path / "spec.json") if special == "fifo" else Path("/dev/zero")
    for command in (["submit", "selftest", "-f", str(spec)], ["pipeline", "run", "eagle3", "-f", str(spec)]):
        done = subprocess.run(
            [sys.executable, "-m", "cli.main", *command, "--url", "http://127.0.0.1:9"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=15,
        )
        assert done.returncode == 2, (command, done.stderr)
        assert f"cannot read {spec}: spec file is" in done.stderr
        assert "Traceback" not in done.stderr
