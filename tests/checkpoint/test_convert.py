"""speculators and SpecForge drafters in, a checkpoint with exactly SGLang's names and shapes out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from drafting.checkpoint import diagnose, fix_checkpoint
from drafting.findings import Severity
from tests.checkpoint.conftest import (
    DRAFT_VOCAB,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTER,
    KV_HEADS,
    VOCAB,
    folder_digest,
)

# What SGLang's LlamaForCausalLMEagle3 loads for this tiny config, written out by hand from
# sglang/srt/models/llama_eagle3.py (independent of drafting.checkpoint.layout): name -> shape.
SGLANG_EXPECTED = {
    "fc.weight": (HIDDEN, 3 * HIDDEN),
    "midlayer.self_attn.q_proj.weight": (HEADS * HEAD_DIM, 2 * HIDDEN),
    "midlayer.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, 2 * HIDDEN),
    "midlayer.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, 2 * HIDDEN),
    "midlayer.self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
    "midlayer.mlp.gate_proj.weight": (INTER, HIDDEN),
    "midlayer.mlp.up_proj.weight": (INTER, HIDDEN),
    "midlayer.mlp.down_proj.weight": (HIDDEN, INTER),
    "midlayer.input_layernorm.weight": (HIDDEN,),
    "midlayer.hidden_norm.weight": (HIDDEN,),
    "midlayer.post_attention_layernorm.weight": (HIDDEN,),
    "norm.weight": (HIDDEN,),
    "lm_head.weight": (DRAFT_VOCAB, HIDDEN),
    "d2t": (DRAFT_VOCAB,),
}


def _shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for path in folder.glob("*.safetensors"):
        with safe_open(str(path), "pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open has no __iter__
                shapes[name] = tuple(fh.get_slice(name).get_shape())
    return shapes


def _values(folder: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for path in folder.glob("*.safetensors"):
        tensors.update(load_file(path))
    return tensors


@pytest.mark.parametrize("version", ["0.5.11", "0.5.14", "0.5.23"])
def test_speculators_draft_converts_to_sglang_layout(
    tmp_path: Path, speculators_draft: Path, target_dir: Path, version: str
) -> None:
    before = folder_digest(speculators_draft)
    assert not diagnose(speculators_draft, target=target_dir, sglang_version=version).ok

    report = fix_checkpoint(speculators_draft, tmp_path / "out", target=target_dir, sglang_version=version)

    assert report.ok, report.render_text()
    assert _shapes(tmp_path / "out") == SGLANG_EXPECTED
    source, converted = _values(speculators_draft), _values(tmp_path / "out")
    for name, value in converted.items():
        original = name.replace("midlayer.", "layers.0.")
        assert torch.equal(value, source[original]), name
    recheck = diagnose(tmp_path / "out", target=target_dir, sglang_version=version)
    assert recheck.ok, recheck.render_text()
    assert recheck.codes(Severity.WARNING) == {"DTYPE"}  # speculators saves float32; nothing else to say
    assert folder_digest(speculators_draft) == before


def test_speculators_config_becomes_sglang_config(
    tmp_path: Path, speculators_draft: Path, target_dir: Path
) -> None:
    report = fix_checkpoint(speculators_draft, tmp_path / "out", target=target_dir)

    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["draft_vocab_size"] == DRAFT_VOCAB
    assert config["vocab_size"] == VOCAB
    # speculators' ids are HF hidden_states indices; SGLang's count decoder-layer outputs.
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 3, 5]
    assert config["rope_theta"] == 500000.0
    assert config["rope_scaling"]["rope_type"] == "llama3"
    assert config["max_position_embeddings"] == 4096
    assert "target_hidden_size" not in config
    assert "transformer_layer_config" not in config
    assert config["hidden_size"] == HIDDEN
    assert config["num_hidden_layers"] == 1
    assert any("eagle_config" in change for change in report.config_changes)


def test_report_lists_every_tensor(tmp_path: Path, speculators_draft: Path, target_dir: Path) -> None:
    report = fix_checkpoint(speculators_draft, tmp_path / "out", target=target_dir)

    renamed = {m.source: m.dest for m in report.of_action("renamed")}
    dropped = {m.source for m in report.of_action("dropped")}
    kept = {m.source for m in report.of_action("kept")}
    assert renamed["layers.0.self_attn.q_proj.weight"] == "midlayer.self_attn.q_proj.weight"
    assert len(renamed) == 10
    assert all(s.startswith("layers.0.") for s in renamed)
    assert dropped == {"embed_tokens.weight", "t2d"}
    assert kept == {"fc.weight", "norm.weight", "lm_head.weight", "d2t"}
    assert len(report.moves) == len(load_file(speculators_draft / "model.safetensors"))
    text = report.render_text()
    assert "layers.0.mlp.up_proj.weight -> midlayer.mlp.up_proj.weight" in text
    assert "t2d" in text


def test_specforge_draft_converts_and_rechecks(
    tmp_path: Path, specforge_draft: Path, target_dir: Path
) -> None:
    before = folder_digest(specforge_draft)
    report = fix_checkpoint(specforge_draft, tmp_path / "out", target=target_dir, sglang_version="0.5.11")

    assert report.ok, report.render_text()
    assert _shapes(tmp_path / "out") == SGLANG_EXPECTED
    assert {m.source for m in report.of_action("dropped")} == {"t2d"}
    assert not report.of_action("renamed")
    assert diagnose(tmp_path / "out", target=target_dir, sglang_version="0.5.11").ok
    assert folder_digest(specforge_draft) == before


def test_sharded_source_and_sharded_output(tmp_path: Path, speculators_draft: Path, target_dir: Path) -> None:
    """A source with an index file goes in; a small shard limit makes the output sharded too."""
    from tests.checkpoint.test_safety import reshard

    source = reshard(speculators_draft, tmp_path / "sharded", shards=3)
    report = fix_checkpoint(source, tmp_path / "out", target=target_dir, max_shard_bytes=8 * 1024)

    assert report.ok, report.render_text()
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert _shapes(tmp_path / "out") == SGLANG_EXPECTED
    assert set(index["weight_map"]) == set(SGLANG_EXPECTED)


def test_conversion_without_target_keeps_draft_sizes(tmp_path: Path, speculators_draft: Path) -> None:
    report = fix_checkpoint(speculators_draft, tmp_path / "out", target=None)

    assert report.ok
    assert report.doctor is not None
    assert "TARGET_NOT_GIVEN" in report.doctor.codes(Severity.INFO)
    assert report.doctor.summary["tensors"] == len(SGLANG_EXPECTED)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["vocab_size"] == VOCAB
