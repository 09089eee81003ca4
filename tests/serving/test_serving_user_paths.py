"""Serving-side reads of user paths: a FIFO or device where a prompt set or model file belongs fails at once
with BAD_INPUT naming the path (before: DATA_MISMATCH for prompts; a hang inside transformers for models)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from contract.params.benchmark import BenchmarkParams
from contract.params.evaluate import EvalParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.serving.engine.models import load_models
from drafting.stages import benchmark, evaluate
from drafting.userfiles import UserFileError
from testsupport.tiny_pair import TinyPair


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(60)
def test_a_fifo_prompt_set_fails_benchmark_and_eval_as_bad_input(
    fifo: Path, tiny_pair: TinyPair, tmp_path: Path
) -> None:
    ctx = StageContext(work_dir=tmp_path)
    bench = BenchmarkParams(url="http://127.0.0.1:9", prompts=str(fifo))
    with pytest.raises(StageError) as caught:
        benchmark.run(ctx, bench)
    assert caught.value.reason == TerminationReason.BAD_INPUT
    assert str(fifo) in caught.value.message
    ev = EvalParams(model=str(tiny_pair.target), draft=str(tiny_pair.draft), prompts=str(fifo), device="cpu")
    with pytest.raises(StageError) as caught:
        evaluate.run(ctx, ev)
    assert caught.value.reason == TerminationReason.BAD_INPUT


def _target_with_fifo(tiny_pair: TinyPair, tmp_path: Path, name: str) -> Path:
    """The tiny target's folder (links to its files) with `name` a FIFO: a read of it would block forever."""
    target = tmp_path / "target"
    target.mkdir()
    for item in Path(tiny_pair.target).iterdir():
        if item.name != name:
            (target / item.name).symlink_to(item)
    os.mkfifo(target / name)
    return target


@pytest.mark.timeout(60)
def test_a_fifo_config_in_the_target_folder_is_refused_before_transformers_reads_it(
    tiny_pair: TinyPair, tmp_path: Path
) -> None:
    target = _target_with_fifo(tiny_pair, tmp_path, "config.json")
    with pytest.raises(UserFileError, match="FIFO"):
        load_models(str(target), None, device=torch.device("cpu"), dtype=torch.float32)


@pytest.mark.timeout(60)
def test_a_fifo_tokenizer_file_fails_a_raw_text_eval_as_bad_input(
    tiny_pair: TinyPair, tmp_path: Path
) -> None:
    """Raw-text prompts make eval look for the target's chat template (chat_source.raw_text_note) before any
    model loads: a FIFO among the tokenizer's files is the user's path, refused as BAD_INPUT, not a crash."""
    target = _target_with_fifo(tiny_pair, tmp_path, "tokenizer_config.json")
    prompts = tmp_path / "raw.jsonl"
    prompts.write_text('{"text": "w1 w2"}\n')
    ev = EvalParams(model=str(target), draft=str(tiny_pair.draft), prompts=str(prompts), device="cpu")
    with pytest.raises(StageError) as caught:
        evaluate.run(StageContext(work_dir=tmp_path), ev)
    assert caught.value.reason == TerminationReason.BAD_INPUT
    assert "tokenizer_config.json" in caught.value.message
