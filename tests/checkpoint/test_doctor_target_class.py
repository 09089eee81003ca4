"""The doctor against the target's SGLang class (the support matrix), on the zoo's tiny targets with drafts
eyas saves for them: refused classes, the DeepSeek id rule, Gemma3's capture per release."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from drafting.checkpoint import diagnose, fix_checkpoint
from drafting.checkpoint.report import DoctorReport
from drafting.findings import Finding, Severity
from drafting.support_matrix import AUX_CAPTURE_KEY
from tests.conftest import ROOT
from tests.zoo_drafts import zoo_draft
from testsupport import target_zoo as zoo

TARGET_CODES = {"TARGET_EAGLE3_UNSUPPORTED", "AUX_LAYERS_SHIFTED", "AUX_CAPTURE_MISMATCH", "AUX_LAYER_IDS"}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("doctor-zoo")


def target(root: Path, name: str) -> Path:
    folder = root / "targets" / name
    return folder if folder.exists() else zoo.build(name, folder)


def draft(root: Path, name: str, release: str, label: str = "", layers: list[int] | None = None) -> Path:
    dest = root / "drafts" / f"{name}-{release}{label}"
    return dest if dest.exists() else zoo_draft(target(root, name), dest, release=release, layers=layers)


def ours(report: DoctorReport) -> list[Finding]:
    return [f for f in report.findings if f.code in TARGET_CODES]


def edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("release", ["0.5.14", "0.5.23"])
@pytest.mark.parametrize("name", sorted(zoo.REFUSED))
def test_a_class_without_the_capture_hook_is_refused_naming_it_and_the_release(
    root: Path, name: str, release: str
) -> None:
    report = diagnose(draft(root, name, release), target=target(root, name), sglang_version=release)
    (refused,) = ours(report)
    assert refused.severity is Severity.ERROR
    assert refused.code == "TARGET_EAGLE3_UNSUPPORTED"
    architecture = json.loads((target(root, name) / "config.json").read_text())["architectures"][0]
    assert f"SGLang {release} cannot serve EAGLE-3 for {architecture}" in refused.message
    assert "set_eagle3_layers_to_capture" in refused.message
    assert not report.ok
    eagle = diagnose(
        draft(root, name, release), target=target(root, name), algorithm="EAGLE", sglang_version=release
    )
    assert "TARGET_EAGLE3_UNSUPPORTED" not in {f.code for f in eagle.findings}  # EAGLE-3's hook only


@pytest.mark.parametrize("release", ["0.5.14", "0.5.23"])
@pytest.mark.parametrize("name", zoo.SERVED)
def test_eyas_drafts_of_served_classes_raise_no_class_finding(root: Path, name: str, release: str) -> None:
    report = diagnose(draft(root, name, release), target=target(root, name), sglang_version=release)
    assert ours(report) == []


def test_deepseek_ids_are_judged_by_its_own_rule(root: Path) -> None:
    deepseek = target(root, "deepseek_v3")
    custom = draft(root, "deepseek_v3", "0.5.14", "-custom", layers=[3, 4, 5])
    assert json.loads((custom / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ] == [3, 4, 5]
    assert ours(diagnose(custom, target=deepseek, sglang_version="0.5.14")) == []

    # ids written by the usual convention (layer - 1): DeepSeek's class keeps them, one layer below
    edit_config(
        custom, eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 3, 4], "use_aux_hidden_state": True}
    )
    (shifted,) = ours(diagnose(custom, target=deepseek, sglang_version="0.5.14"))
    assert shifted.severity is Severity.ERROR  # eyas recorded the layers it trained on
    assert shifted.code == "AUX_LAYERS_SHIFTED"
    assert "captures layers [2, 3, 4] for ids [2, 3, 4]" in shifted.message
    assert "trained on layers [3, 4, 5]" in shifted.message
    assert "eagle_aux_hidden_state_layer_ids = [3, 4, 5]" in shifted.fix

    # a draft from another trainer does not say what it learned from: the usual convention is assumed
    config = json.loads((custom / "config.json").read_text())
    del config[AUX_CAPTURE_KEY]
    (custom / "config.json").write_text(json.dumps(config))
    (foreign,) = ours(diagnose(custom, target=deepseek, sglang_version="0.5.14"))
    assert foreign.severity is Severity.WARNING
    assert "not the layers [3, 4, 5] these ids name by the usual convention" in foreign.message

    # the default layers [2, 4, 5] give ids starting at 1, which DeepSeek shifts like everyone: no warning
    defaults = draft(root, "deepseek_v3", "0.5.14", "-foreign-default")
    config = json.loads((defaults / "config.json").read_text())
    del config[AUX_CAPTURE_KEY]
    (defaults / "config.json").write_text(json.dumps(config))
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert ours(diagnose(defaults, target=deepseek, sglang_version="0.5.14")) == []
    assert ours(diagnose(defaults, target=target(root, "kimi_k25"), sglang_version="0.5.23")) == []


def test_gemma3_drafts_must_match_the_release_they_are_served_with(root: Path) -> None:
    gemma = target(root, "gemma3_text")
    for_0514 = draft(root, "gemma3_text", "0.5.14")
    assert ours(diagnose(for_0514, target=gemma, sglang_version="0.5.14")) == []
    (mismatch,) = ours(diagnose(for_0514, target=gemma, sglang_version="0.5.23"))
    assert mismatch.severity is Severity.ERROR
    assert mismatch.code == "AUX_CAPTURE_MISMATCH"
    assert "the post-feedforward branch of layer id, without the residual" in mismatch.message
    assert "trained on the residual stream" in mismatch.message
    (back,) = ours(diagnose(draft(root, "gemma3_text", "0.5.23"), target=gemma, sglang_version="0.5.14"))
    assert back.code == "AUX_CAPTURE_MISMATCH"


def test_the_doctor_command_refuses_a_mixtral_target_without_a_traceback(root: Path) -> None:
    argv = [sys.executable, "-m", "cli.main", "doctor", str(draft(root, "mixtral", "0.5.14"))]
    argv += ["--target", str(target(root, "mixtral")), "--sglang-version", "0.5.14"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TARGET_EAGLE3_UNSUPPORTED" in done.stdout
    assert "SGLang 0.5.14 cannot serve EAGLE-3 for MixtralForCausalLM" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("name", "ids"), [("deepseek_v3", [3, 4, 5]), ("kimi_k25", [3, 4, 5]), ("llama", [2, 3, 4])]
)
def test_fix_keys_moves_speculators_ids_by_the_target_class_rule(
    root: Path, name: str, ids: list[int]
) -> None:
    """speculators writes HF indices at the top level; fix_keys writes the ids under which the target's class
    captures those layers."""
    source = draft(root, name, "0.5.14", "-speculators-ids")
    config = json.loads((source / "config.json").read_text())
    del config["eagle_config"], config[AUX_CAPTURE_KEY]
    config["eagle_aux_hidden_state_layer_ids"] = [3, 4, 5]
    (source / "config.json").write_text(json.dumps(config))
    (root / "fixed").mkdir(exist_ok=True)
    dest = root / "fixed" / name
    report = fix_checkpoint(source, dest, target=target(root, name), sglang_version="0.5.14")
    written = json.loads((dest / "config.json").read_text())
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == ids
    assert ours(report.doctor) == [], report.doctor.render_text()
