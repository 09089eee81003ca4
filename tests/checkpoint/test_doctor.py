"""Each defect of a drafter gives its own finding, with a fix; the clean drafter gives none."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from drafting.checkpoint import diagnose
from drafting.findings import Severity
from drafting.sglang_facts import parse_version, rules_for
from tests.checkpoint.conftest import Patch


@dataclass(frozen=True)
class Defect:
    patch: Patch
    code: str
    severity: Severity
    version: str = "0.5.14"
    algorithm: str = "EAGLE3"
    subject: str | None = None


def _rename(old: str, new: str) -> Patch:
    def patch(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        for name in [n for n in tensors if n.startswith(old)]:
            tensors[new + name[len(old) :]] = tensors.pop(name)

    return patch


def _config(**changes: Any) -> Patch:
    return lambda config, tensors: config.update(changes)


def _drop_config(key: str) -> Patch:
    return lambda config, tensors: config.pop(key)


def _tensor(name: str, value: torch.Tensor | None) -> Patch:
    def patch(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value

    return patch


def _prefix_all(prefix: str) -> Patch:
    def patch(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        for name in list(tensors):
            tensors[prefix + name] = tensors.pop(name)

    return patch


def _d2t_out_of_range(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    tensors["d2t"] = tensors["d2t"].clone()
    tensors["d2t"][-1] = 1000


def _all_float32(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    for name, value in tensors.items():
        if value.is_floating_point():
            tensors[name] = value.float()


def _both(*patches: Patch) -> Patch:
    def patch(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        for each in patches:
            each(config, tensors)

    return patch


def _copy_layer_as_layers0(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    for name in [n for n in tensors if n.startswith("midlayer.")]:
        tensors["layers.0." + name.removeprefix("midlayer.")] = tensors[name].clone()


BF16 = torch.bfloat16
ERR, WARN = Severity.ERROR, Severity.WARNING
DEFECTS: dict[str, Defect] = {
    "layers0 on 0.5.11": Defect(_rename("midlayer.", "layers.0."), "TENSOR_IGNORED", ERR, "0.5.11"),
    "layer weights lost on 0.5.11": Defect(
        _rename("midlayer.", "layers.0."), "TENSOR_MISSING", ERR, "0.5.11"
    ),
    "fc missing": Defect(_tensor("fc.weight", None), "TENSOR_MISSING", ERR, subject="fc.weight"),
    "norm missing": Defect(_tensor("norm.weight", None), "TENSOR_MISSING", ERR, subject="norm.weight"),
    "lm_head missing": Defect(
        _tensor("lm_head.weight", None), "TENSOR_MISSING", ERR, subject="lm_head.weight"
    ),
    "layer part missing": Defect(
        _tensor("midlayer.self_attn.k_proj.weight", None),
        "TENSOR_MISSING",
        ERR,
        subject="midlayer.self_attn.k_proj.weight",
    ),
    "d2t missing": Defect(_tensor("d2t", None), "TENSOR_MISSING", ERR, subject="d2t"),
    "trainer prefix": Defect(
        _prefix_all("draft_model."), "TRAINER_PREFIX", ERR, subject="draft_model.fc.weight"
    ),
    "embed carried": Defect(
        _tensor("embed_tokens.weight", torch.zeros(256, 32, dtype=BF16)), "EMBED_CARRIED", WARN
    ),
    "fc for another target": Defect(_config(target_hidden_size=48), "FC_SHAPE", ERR, subject="fc.weight"),
    "target hidden differs": Defect(_config(target_hidden_size=48), "TARGET_HIDDEN_SIZE", ERR),
    "target hidden null": Defect(_config(target_hidden_size=None), "TARGET_HIDDEN_SIZE", ERR),
    "qkv input H": Defect(
        _tensor("midlayer.self_attn.q_proj.weight", torch.zeros(32, 32, dtype=BF16)), "QKV_INPUT", ERR
    ),
    "lm_head full vocab": Defect(
        _tensor("lm_head.weight", torch.zeros(256, 32, dtype=BF16)), "LM_HEAD_SHAPE", ERR
    ),
    "d2t float": Defect(_tensor("d2t", torch.zeros(64)), "D2T_DTYPE", ERR),
    "d2t short": Defect(_tensor("d2t", torch.zeros(32, dtype=torch.int64)), "D2T_SHAPE", ERR),
    "d2t out of range": Defect(_d2t_out_of_range, "D2T_RANGE", ERR),
    "EAGLE architecture": Defect(_config(architectures=["LlamaForCausalLM"]), "ARCHITECTURE", ERR),
    "no draft_vocab_size": Defect(_drop_config("draft_vocab_size"), "DRAFT_VOCAB_MISSING", ERR),
    "other vocab": Defect(_config(vocab_size=300), "VOCAB_MISMATCH", ERR),
    "other rope": Defect(_config(rope_theta=10000.0), "ROPE_MISMATCH", WARN),
    "short context": Defect(_config(max_position_embeddings=512), "CONTEXT_SHORTER", WARN),
    "speculators ids at top level": Defect(
        _config(eagle_aux_hidden_state_layer_ids=[1, 4, 6]), "AUX_LAYER_IDS", ERR
    ),
    "aux id past the last layer": Defect(
        _config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 7]}), "AUX_LAYER_IDS", ERR
    ),
    "norm_before_residual": Defect(_config(norm_before_residual=True), "NORM_UNSUPPORTED", ERR, "0.5.23"),
    "norm_before_fc on 0.5.14": Defect(_config(norm_before_fc=True), "NORM_UNSUPPORTED", ERR),
    "fc_norm on 0.5.11": Defect(_config(fc_norm=True), "NORM_UNSUPPORTED", ERR, "0.5.11"),
    "norm_output on 0.5.11": Defect(_config(norm_output=True), "NORM_UNSUPPORTED", ERR, "0.5.11"),
    "sliding window": Defect(
        _config(layer_types=["sliding_attention"], sliding_window=2048), "SLIDING_WINDOW", WARN
    ),
    "sliding window on 0.5.11": Defect(
        _config(layer_types=["sliding_attention"], sliding_window=2048), "SLIDING_WINDOW", ERR, "0.5.11"
    ),
    "two layers on 0.5.11": Defect(_config(num_hidden_layers=2), "NUM_LAYERS", ERR, "0.5.11"),
    "float32": Defect(_all_float32, "DTYPE", WARN),
    "int8 weight": Defect(_tensor("norm.weight", torch.ones(32, dtype=torch.int8)), "DTYPE", ERR),
    "tied embeddings": Defect(_config(tie_word_embeddings=True), "TIED_EMBEDDINGS", ERR),
    "served as EAGLE": Defect(_config(), "ALGORITHM_MISMATCH", ERR, algorithm="EAGLE"),
    "stray tensor": Defect(_tensor("optimizer.step", torch.zeros(1)), "TENSOR_IGNORED", WARN),
    "weight without a parameter": Defect(
        _tensor("midlayer.self_attn.q_norm.weight", torch.ones(8, dtype=BF16)), "TENSOR_IGNORED", ERR
    ),
    "layer twice on 0.5.14": Defect(_copy_layer_as_layers0, "TENSOR_DUPLICATE", ERR),
    "q bias dropped": Defect(
        _tensor("midlayer.self_attn.q_proj.bias", torch.zeros(32, dtype=BF16)), "TENSOR_IGNORED", ERR
    ),
}


def test_clean_draft_has_no_errors_or_warnings(clean_draft: Path, target_dir: Path) -> None:
    for version in ("0.5.11", "0.5.14", "0.5.23"):
        report = diagnose(clean_draft, target=target_dir, sglang_version=version)
        assert report.ok, report.render_text()
        assert not report.codes(Severity.WARNING), report.render_text()
        assert {"TOTAL_SIZE", "DTYPE"} <= report.codes(Severity.INFO)


@pytest.mark.parametrize("case", list(DEFECTS), ids=list(DEFECTS))
def test_each_defect_gives_its_finding(
    case: str, broken_draft: Callable[[Patch], Path], target_dir: Path
) -> None:
    defect = DEFECTS[case]
    draft = broken_draft(defect.patch)

    report = diagnose(draft, target=target_dir, algorithm=defect.algorithm, sglang_version=defect.version)

    matching = [f for f in report.findings if f.code == defect.code and f.severity is defect.severity]
    assert matching, report.render_text()
    assert all(f.fix for f in report.findings if f.severity is not Severity.INFO), report.render_text()
    if defect.subject:
        assert any(defect.subject in f.subjects for f in matching), matching
    assert report.ok is (defect.severity is not Severity.ERROR and not report.errors)


def test_layers0_loads_from_0_5_12_on(broken_draft: Callable[[Patch], Path], target_dir: Path) -> None:
    draft = broken_draft(_rename("midlayer.", "layers.0."))

    assert not diagnose(draft, target=target_dir, sglang_version="0.5.11").ok
    assert diagnose(draft, target=target_dir, sglang_version="0.5.12").ok


def test_norm_before_fc_needs_0_5_17_and_its_weight(
    broken_draft: Callable[[Patch], Path], target_dir: Path
) -> None:
    draft = broken_draft(_config(norm_before_fc=True))
    report = diagnose(draft, target=target_dir, sglang_version="0.5.17")
    assert "NORM_UNSUPPORTED" not in report.codes()
    assert "model.input_norm.weight" not in str(report.to_dict())  # reported by checkpoint name
    assert "input_norm.weight" in {
        s for f in report.findings if f.code == "TENSOR_MISSING" for s in f.subjects
    }

    with_weight = broken_draft(
        _both(_config(norm_before_fc=True), _tensor("input_norm.weight", torch.ones(96, dtype=BF16)))
    )
    assert diagnose(with_weight, target=target_dir, sglang_version="0.5.17").ok
    assert not diagnose(with_weight, target=target_dir, sglang_version="0.5.16").ok


def test_embedding_is_required_when_hidden_sizes_differ(
    broken_draft: Callable[[Patch], Path], tmp_path: Path
) -> None:
    """SGLang shares the target's embedding only when the hidden sizes match."""
    wide_target = tmp_path / "wide"
    wide_target.mkdir()
    config = {"hidden_size": 48, "vocab_size": 256, "num_hidden_layers": 8, "max_position_embeddings": 4096}
    (wide_target / "config.json").write_text(json.dumps(config))
    fc = torch.zeros(32, 3 * 48, dtype=BF16)
    draft = broken_draft(_both(_config(target_hidden_size=48), _tensor("fc.weight", fc)))

    report = diagnose(draft, target=wide_target)

    assert "embed_tokens.weight" in {
        s for f in report.findings if f.code == "TENSOR_MISSING" for s in f.subjects
    }
    assert "FC_SHAPE" not in report.codes()


def test_unreadable_target_is_an_error_finding(clean_draft: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("not json")
    report = diagnose(clean_draft, target=tmp_path)
    assert "TARGET_UNREADABLE" in report.codes(Severity.ERROR)


def test_target_can_be_a_config_path(clean_draft: Path, target_dir: Path) -> None:
    assert diagnose(clean_draft, target=target_dir / "config.json").ok


def test_report_renders_and_serialises(broken_draft: Callable[[Patch], Path], target_dir: Path) -> None:
    draft = broken_draft(_rename("midlayer.", "layers.0."))
    report = diagnose(draft, target=target_dir, sglang_version="0.5.11")

    data = json.loads(json.dumps(report.to_dict()))
    text = report.render_text()
    assert data["ok"] is False
    assert data["findings"][0]["severity"] == "error"  # errors first
    assert "TENSOR_IGNORED" in {f["code"] for f in data["findings"]}
    assert "NOT LOADABLE" in text
    assert "fix:" in text
    assert "midlayer" in text


def test_newer_release_than_verified_gets_a_note(clean_draft: Path) -> None:
    report = diagnose(clean_draft, sglang_version="0.6.1")
    assert "VERSION_UNVERIFIED" in report.codes(Severity.INFO)


def test_versions_parse_and_pick_their_rows() -> None:
    assert parse_version("v0.5.12.post1") == (0, 5, 12)
    assert rules_for("0.5.11").layer_module == "midlayer"
    assert rules_for("0.5.12").layer_module == "layers"
    assert "norm_before_fc" in rules_for("0.5.17").options
    assert "norm_before_fc" not in rules_for("0.5.16").options
    with pytest.raises(ValueError, match="older"):
        rules_for("0.4.10")
    with pytest.raises(ValueError, match="not an SGLang version"):
        rules_for("latest")
