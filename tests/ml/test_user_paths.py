"""Every file the ML library and its stages read from a user-given path: a FIFO, /dev/zero (through a
symlink), a folder or an oversized sparse file fails at once with the path in the message, and a stage
ends BAD_INPUT instead of hanging until its timeout. The timeouts make a regression fail, not hang."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from contract.params.extract import ExtractParams
from contract.params.selftest import SelftestParams
from contract.params.train import TrainParams
from contract.reasons import TerminationReason
from drafting.context import RecordingSink, StageContext, StageError
from drafting.ml import hidden_store, train_state
from drafting.ml._checkpoint import read_drafter_config
from drafting.ml._dataset import file_sha256, read_dataset_rows, read_token_freq, tokenizer_sha256
from drafting.ml.conversations import tokenize_file
from drafting.ml.extraction import load_target_model
from drafting.ml.target_head import load_target_head
from drafting.ml.train_data import open_extraction
from drafting.stages import extract, selftest, train
from drafting.userfiles import Cap, UserFileError
from tests.ml.guard import run_guarded
from tests.ml.stage_process import run_stage_process
from testsupport.tiny_targets import chat, random_target, write_jsonl
from workers import stage_main

pytestmark = pytest.mark.timeout(60)


def _fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def _zero(path: Path) -> Path:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")
    return path


def _folder(path: Path) -> Path:
    path.unlink(missing_ok=True)
    path.mkdir()
    return path


def _sparse(path: Path) -> Path:
    path.unlink(missing_ok=True)
    with path.open("wb") as handle:
        handle.truncate(Cap.TOKENIZER + 1)
    return path


SPECIALS = {"fifo": _fifo, "dev_zero": _zero, "folder": _folder}


def _refused(call: Callable[[], Any], path: Path) -> str:
    """The UserFileError message `call` raised at once, naming `path` (run guarded: tests/ml/guard.py)."""
    started = time.monotonic()
    outcome = run_guarded(call)
    assert outcome.raised == "UserFileError", outcome
    assert time.monotonic() - started < 10
    assert str(path) in outcome.message
    return outcome.message


@pytest.fixture(scope="module")
def target_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return random_target(tmp_path_factory.mktemp("saved") / "target")


@pytest.fixture
def target(tmp_path: Path, target_files: Path) -> Path:
    """A fresh copy of the tiny target (hard links: nothing is rewritten in place)."""
    folder = tmp_path / "target"
    folder.mkdir()
    for file in target_files.iterdir():
        os.link(file, folder / file.name)
    return folder


@pytest.mark.parametrize("special", [*SPECIALS, "over_long_line"])
def test_conversation_data(tmp_path: Path, special: str) -> None:
    data = tmp_path / "data.jsonl"
    if special == "over_long_line":
        with data.open("w") as handle:
            handle.write('{"messages": []}\n' + '"' + "x" * Cap.LINE + '"\n')
    else:
        SPECIALS[special](data)
    error = _refused(lambda: tokenize_file(data, None, max_len=64, overlong="drop"), data)
    if special == "over_long_line":
        assert "conversation data line 2 is longer than" in error
    else:  # the extract stage hashes the data before it tokenizes it
        _refused(lambda: file_sha256(data, Cap.DATASET, "conversation data"), data)


@pytest.mark.parametrize("special", [*SPECIALS, "oversized"])
def test_extraction_folder_files(tmp_path: Path, special: str) -> None:
    make = _sparse if special == "oversized" else SPECIALS[special]
    manifest = make(tmp_path / hidden_store.MANIFEST)
    _refused(lambda: hidden_store.read_manifest(tmp_path), manifest)
    _refused(lambda: open_extraction(tmp_path, {}), manifest)
    freq = make(tmp_path / hidden_store.TOKEN_FREQ)
    _refused(lambda: read_token_freq(tmp_path), freq)
    (tmp_path / hidden_store.MANIFEST).unlink() if special != "folder" else None


def test_hidden_state_files(tmp_path: Path) -> None:
    (tmp_path / hidden_store.HIDDEN_DIR).mkdir()
    sample = _fifo(hidden_store.hidden_path(tmp_path, 0))
    assert hidden_store.read_header(sample) is None  # pending: extracted again, never waited on
    _refused(lambda: hidden_store.load_sample(tmp_path, 0), sample)
    _zero(sample)
    assert hidden_store.read_header(sample) is None
    # A header length beyond safetensors' limit is not read (it would allocate that much first).
    sample.unlink()
    sample.write_bytes((2**62).to_bytes(8, "little") + b"{}")
    assert hidden_store.read_header(sample) is None
    _fifo(tmp_path / "state.json")
    _refused(lambda: read_dataset_rows(tmp_path), tmp_path / "state.json")


@pytest.mark.parametrize("special", list(SPECIALS))
def test_target_files_read_by_training_and_extraction(target: Path, special: str) -> None:
    weights = SPECIALS[special](target / "model.safetensors")
    _refused(lambda: load_target_head(target), weights)
    _refused(lambda: load_target_model(target, dtype=torch.float32, device=torch.device("cpu")), weights)
    weights.unlink() if special != "folder" else weights.rmdir()
    index = SPECIALS[special](target / "model.safetensors.index.json")
    _refused(lambda: load_target_head(target), index)
    tokenizer = SPECIALS[special](target / "tokenizer.json")
    _refused(lambda: tokenizer_sha256(target), tokenizer)


@pytest.mark.parametrize("special", list(SPECIALS))
def test_drafter_config_and_training_state(tmp_path: Path, special: str) -> None:
    config = SPECIALS[special](tmp_path / "config.json")
    _refused(lambda: read_drafter_config(tmp_path), config)
    state = SPECIALS[special](tmp_path / train_state.STATE_FILE)
    _refused(lambda: train_state.load_state(tmp_path), state)


def _extract_params(target: Path, data: Path, output: Path, **more: Any) -> ExtractParams:
    return ExtractParams(
        target=str(target), data=str(data), output=str(output), device="cpu", dtype="float32", **more
    )


def _data(tmp_path: Path) -> Path:
    import random

    rng = random.Random(0)
    return write_jsonl(tmp_path / "data.jsonl", [chat(rng, turns=1, words=3) for _ in range(3)])


@pytest.mark.parametrize("which", ["config.json", "tokenizer_config.json", "data", "tokenizer_folder"])
def test_extract_stage_refuses_a_fifo_before_anything_runs(target: Path, tmp_path: Path, which: str) -> None:
    data = _data(tmp_path)
    more: dict[str, Any] = {}
    if which == "data":
        fifo = _fifo(data)
    elif which == "tokenizer_folder":
        tokenizer = tmp_path / "tok"
        tokenizer.mkdir()
        fifo = _fifo(tokenizer / "tokenizer.json")
        more["tokenizer"] = str(tokenizer)
    else:
        fifo = _fifo(target / which)
    params = _extract_params(target, data, tmp_path / "out", **more)
    ctx = StageContext(work_dir=tmp_path, sink=RecordingSink())
    _refused(lambda: extract.run(ctx, params), fifo)


def test_train_stage_refuses_a_fifo_target_config(target: Path, tmp_path: Path) -> None:
    fifo = _fifo(target / "config.json")
    params = TrainParams(
        data=str(tmp_path / "hs"), target=str(target), output=str(tmp_path / "run"), device="cpu"
    )
    _refused(lambda: train.run(StageContext(work_dir=tmp_path), params), fifo)


def test_selftest_marker_that_is_a_fifo(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "marker")
    params = SelftestParams(marker_file=str(fifo), lines=0)
    _refused(lambda: selftest.run(StageContext(work_dir=tmp_path), params), fifo)


def test_stage_main_turns_a_refused_file_into_bad_input(tmp_path: Path) -> None:
    """In the stage process, UserFileError (from the params file or from a stage) ends the job BAD_INPUT."""
    sink = RecordingSink()
    ctx = StageContext(work_dir=tmp_path, sink=sink)
    params_file = _fifo(tmp_path / "params.json")
    assert stage_main._run(ctx, sink, "selftest", params_file) == 1  # type: ignore[arg-type]
    (error,) = sink.of_type("error")
    assert error["reason"] == TerminationReason.BAD_INPUT
    assert str(params_file) in error["message"]
    assert "FIFO" in error["message"]
    assert error["details"] == {"path": str(params_file), "problem": "not_regular"}
    as_stage_error = StageError.bad_input(UserFileError(params_file, "x", "too_large"))
    assert as_stage_error.reason == TerminationReason.BAD_INPUT


@pytest.mark.timeout(120)  # past the runner's own 30 s + 10 s grace: a regression fails, leaving no process
def test_an_extract_job_whose_target_has_a_fifo_config_fails_promptly(target: Path, tmp_path: Path) -> None:
    """The whole path as the worker runs it: `python -m workers.stage_main` through the process runner."""
    fifo = _fifo(target / "config.json")
    params = _extract_params(target, _data(tmp_path), tmp_path / "out")
    started = time.monotonic()
    run = run_stage_process("extract", params, tmp_path, timeout_s=30)
    took = time.monotonic() - started
    assert not run.result.timed_out, run.log
    assert run.result.exit_code == 1, run.log
    (error,) = run.of_type("error")
    assert error["reason"] == "BAD_INPUT"
    assert str(fifo) in error["message"]
    assert "FIFO" in error["message"]
    assert f"error: {fifo}" in run.log
    assert "Traceback" not in run.log
    assert took < 30
