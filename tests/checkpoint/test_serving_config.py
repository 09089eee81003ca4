"""Every config field SGLang reads for a draft survives fix_keys, from each trainer's own save; the doctor
derives the draft's serving dtype the way SGLang does and flags a draft SGLang would build in the wrong one.

The sources are saved by the libraries themselves (speculators' and SpecForge's save_pretrained, eyas's
save_drafter); the converted config is read back through transformers' AutoConfig, as SGLang's HF config
parser reads it, and compared with the source as its own library reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig

from drafting.checkpoint import diagnose, fix_checkpoint
from drafting.checkpoint.sglang_reading import _eyas_dtype, read_as_sglang
from drafting.findings import Severity
from tests._drafts import write_speculators_draft
from tests.checkpoint.conftest import DRAFT_VOCAB, TARGET_CONFIG, TINY, write_specforge_draft

# Read by SGLang's LlamaForCausalLMEagle3 / LlamaDecoderLayer / ModelConfig (docs/checkpoint.md lists the
# sources), and kept exactly as the trainer wrote them.
KEPT_FROM_LAYER = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "hidden_act",
    "num_hidden_layers",
    "attention_bias",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)
KEPT_DRAFT_OPTIONS = (
    "draft_vocab_size",
    "tie_word_embeddings",
    "norm_before_fc",
    "fc_norm",
    "norm_output",
    "bias",
)
SPECULATORS_AUX_IDS = [1, 4, 6]  # tests/_drafts.py, HF hidden_states indices


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory, speculators_draft: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    from drafting.ml._checkpoint import save_drafter
    from drafting.ml.drafter import Eagle3Drafter

    eyas = Eagle3Drafter.from_target_config(
        TARGET_CONFIG, draft_vocab_size=DRAFT_VOCAB, aux_layer_ids=[2, 4, 5]
    )
    save_drafter(eyas, root / "eyas", target_config=TARGET_CONFIG)
    return {
        "speculators-bf16": write_speculators_draft(root / "spec-bf16", TINY, torch.bfloat16),
        "speculators-fp32": speculators_draft,
        "specforge-bf16": write_specforge_draft(root / "specforge-bf16", torch.bfloat16),
        "specforge-fp32": write_specforge_draft(root / "specforge-fp32"),
        "eyas": root / "eyas",
    }


def _source_as_its_library_reads_it(folder: Path) -> tuple[Any, dict[str, Any]]:
    """(the decoder layer's config object, the draft-level fields) of a source checkpoint."""
    raw = json.loads((folder / "config.json").read_text())
    if "transformer_layer_config" in raw:  # speculators: the layer nested, draft fields at the top
        layer = dict(raw["transformer_layer_config"])
        return AutoConfig.for_model(layer.pop("model_type"), **layer), raw
    return AutoConfig.from_pretrained(folder), raw


def _aux_ids_sglang_should_capture(raw: dict[str, Any]) -> list[int] | None:
    if "transformer_layer_config" in raw:
        return [i - 1 for i in raw["eagle_aux_hidden_state_layer_ids"]]  # SGLang adds 1 back
    eagle = raw.get("eagle_config") or {}
    return eagle.get("eagle_aux_hidden_state_layer_ids")


@pytest.mark.parametrize(
    "name", ["speculators-bf16", "speculators-fp32", "specforge-bf16", "specforge-fp32", "eyas"]
)
def test_every_field_sglang_reads_survives_fix_keys(
    name: str, sources: dict[str, Path], target_dir: Path, tmp_path: Path
) -> None:
    source = sources[name]
    report = fix_checkpoint(source, tmp_path / "out", target=target_dir)
    assert report.ok, report.render_text()
    out = AutoConfig.from_pretrained(tmp_path / "out")  # what SGLang's get_config returns
    layer, raw = _source_as_its_library_reads_it(source)
    target = AutoConfig.for_model(**TARGET_CONFIG)

    lost = {f: (getattr(layer, f, None), getattr(out, f, None)) for f in KEPT_FROM_LAYER}
    assert {f: pair for f, pair in lost.items() if pair[0] != pair[1]} == {}
    for option in KEPT_DRAFT_OPTIONS:
        assert bool(getattr(out, option, None)) == bool(raw.get(option, getattr(layer, option, None))), option
    assert out.draft_vocab_size == DRAFT_VOCAB
    assert out.architectures == ["LlamaForCausalLMEagle3"]
    # SGLang sizes fc from target_hidden_size whenever the attribute exists (hasattr), even when null.
    assert not hasattr(out, "target_hidden_size")
    eagle = getattr(out, "eagle_config", None) or {}
    assert eagle.get("eagle_aux_hidden_state_layer_ids") == _aux_ids_sglang_should_capture(raw)
    # Adopted from the target: the draft runs on its tokens, at its positions, on its hidden states.
    assert out.vocab_size == target.vocab_size
    assert out.rope_parameters == target.rope_parameters
    assert out.max_position_embeddings >= target.max_position_embeddings
    assert out.dtype == torch.bfloat16  # the target's: SGLang builds the draft in its own config's dtype
    assert read_as_sglang(json.loads((tmp_path / "out" / "config.json").read_text())).dtype == "bfloat16"


def test_speculators_dtype_moves_down_without_a_target(sources: dict[str, Path], tmp_path: Path) -> None:
    """speculators writes the dtype only at its top level: the flat config must carry it."""
    report = fix_checkpoint(sources["speculators-bf16"], tmp_path / "out")
    assert report.ok, report.render_text()
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (written["torch_dtype"], written["dtype"]) == ("bfloat16", "bfloat16")
    assert AutoConfig.from_pretrained(tmp_path / "out").dtype == torch.bfloat16


def test_fp32_draft_without_a_target_is_written_with_a_warning(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    """fp32 weights say nothing about the serving dtype; SGLang would serve them in float16."""
    report = fix_checkpoint(sources["speculators-fp32"], tmp_path / "out")
    assert report.ok, report.render_text()
    assert report.doctor is not None
    assert "DTYPE_UNCHECKED" in report.doctor.codes(Severity.WARNING)
    assert report.doctor.summary["sglang_dtype"] == "float16"


def _strip_dtype(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.pop("torch_dtype", None)
    config.pop("dtype", None)
    (folder / "config.json").write_text(json.dumps(config))


def test_doctor_flags_the_old_output_without_dtype(
    sources: dict[str, Path], target_dir: Path, tmp_path: Path
) -> None:
    """What fix-keys used to write for a bf16 speculators draft: SGLang 0.5.14 built it in float16 and the
    scheduler died at the first request. The doctor must say so, with and without the target."""
    out = tmp_path / "out"
    assert fix_checkpoint(sources["speculators-bf16"], out, target=target_dir).ok
    _strip_dtype(out)

    with_target = diagnose(out, target=target_dir)
    assert "DTYPE_MISMATCH" in with_target.codes(Severity.ERROR), with_target.render_text()
    finding = next(f for f in with_target.errors if f.code == "DTYPE_MISMATCH")
    assert "in float16" in finding.message
    assert "bfloat16" in finding.message
    assert '"torch_dtype": "bfloat16"' in finding.fix
    assert with_target.summary["sglang_dtype"] == "float16"

    alone = diagnose(out)
    assert "DTYPE_MISMATCH" in alone.codes(Severity.ERROR), alone.render_text()


def test_doctor_uses_the_installed_sglangs_own_functions(clean_draft: Path) -> None:
    pytest.importorskip("sglang")
    report = diagnose(clean_draft)
    assert report.summary["sglang_reading"].startswith("sglang 0.5."), report.summary
    assert "installed" in report.summary["sglang_reading"]


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": "llama"},
        {"model_type": "llama", "torch_dtype": "bfloat16"},
        {"model_type": "llama", "torch_dtype": "float32"},
        {"model_type": "llama", "dtype": "float16", "torch_dtype": "bfloat16"},
        {"model_type": "llama", "dtype": "half"},
        {"model_type": "gemma2", "torch_dtype": "float32"},
        {"speculators_model_type": "eagle3", "dtype": "bfloat16"},
    ],
)
def test_eyas_dtype_rules_match_sglangs_own_code(config: dict[str, Any]) -> None:
    """The fallback used where sglang is absent must decide as the installed sglang does."""
    installed = read_as_sglang(config)
    if "installed" not in installed.reader:
        pytest.skip(f"no installed sglang to compare with: {installed.reader}")
    assert _eyas_dtype(config, "auto") == installed.dtype
