"""The recorded release tables against SGLang's own sources: re-derived from the installed release, and each
recorded id rule run against the release's own `set_eagle3_layers_to_capture`.

A release bump is a data change: `python -m drafting.support_matrix record` writes the new table, and these
tests fail until someone has read the changed capture code and recorded its rule.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from drafting.support_matrix import support_for_architecture
from drafting.support_matrix.__main__ import derive, differences
from drafting.support_matrix.releases import (
    installed_release,
    load_table,
    recorded_tables,
    table_for,
)
from drafting.support_matrix.rules import IdRule
from drafting.support_matrix.scan import CAPTURE_METHOD, installed_models_dir, scan_release
from tests.support_matrix.sglang_hooks import sglang_layers_to_capture

MODELS = installed_models_dir()
RELEASE = installed_release()
pytestmark = pytest.mark.skipif(MODELS is None, reason="sglang is not installed for this python")


def installed_table() -> Any:
    assert RELEASE is not None
    tables = {table.release: table for table in recorded_tables().values()}
    assert RELEASE in tables, f"no recorded table for the installed SGLang {RELEASE}: record one"
    return tables[RELEASE]


def test_the_installed_release_re_derives_to_its_recorded_table() -> None:
    assert MODELS is not None
    assert RELEASE is not None
    derived = derive(MODELS, RELEASE, None, reread=False)
    recorded = installed_table()
    assert differences(recorded, derived) == []
    assert derived.architectures == recorded.architectures
    assert derived.module_digests == recorded.module_digests
    assert derived.rules == recorded.rules


def test_a_changed_capture_module_leaves_its_rule_unread(tmp_path: Path) -> None:
    """The check can fail: edit the module a rule was read from, and the rule is no longer vouched for."""
    assert MODELS is not None
    assert RELEASE is not None
    copy = tmp_path / "models"
    shutil.copytree(MODELS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    llama = copy / "llama.py"
    llama.write_text(llama.read_text() + "\n\ndef added_in_a_new_release():\n    return 1\n")
    derived = derive(copy, RELEASE, None, reread=False)
    assert derived.rules["llama.LlamaForCausalLM"] == {"unread": True, "read": []}
    assert derived.rules["qwen2.Qwen2ForCausalLM"] == installed_table().rules["qwen2.Qwen2ForCausalLM"]
    assert "llama.LlamaForCausalLM: capture rule not read" in " ".join(
        differences(installed_table(), derived)
    )


def test_hooks_resolve_through_bases_imports_and_entry_lists(tmp_path: Path) -> None:
    (tmp_path / "base.py").write_text(
        "class BaseForCausalLM(nn.Module):\n"
        f"    def {CAPTURE_METHOD}(self, layer_ids=None):\n        pass\n"
        "EntryClass = BaseForCausalLM\n"
    )
    (tmp_path / "child.py").write_text(
        "from sglang.srt.models.base import BaseForCausalLM as Renamed\n"
        "class ChildForCausalLM(Renamed):\n    pass\n"
        "class LoneForCausalLM(nn.Module):\n    pass\n"
        "EntryClass = [ChildForCausalLM, LoneForCausalLM]\n"
    )
    (tmp_path / "reexport.py").write_text(
        "from .child import ChildForCausalLM\nEntryClass = [ChildForCausalLM]\n"
    )
    scanned = scan_release(tmp_path)
    assert scanned.hooks == {
        "BaseForCausalLM": "base.BaseForCausalLM",
        "ChildForCausalLM": "base.BaseForCausalLM",
        "LoneForCausalLM": None,
    }
    assert scanned.modules["ChildForCausalLM"] == "child"


# ---- The recorded id rules, run against the release's own method

N = 8
ID_LISTS = [None, [1, 3, 4], [2, 3, 4], [0, 3, 4], [3, 4, 5], [1, 4, N], [2, 5, 7]]


def test_every_recorded_id_rule_is_what_the_release_method_does() -> None:
    assert MODELS is not None
    table = installed_table()
    checked = 0
    for hook, rule in table.rules.items():
        if "unreadable" in rule:
            continue
        served = next(a for a, entry in table.architectures.items() if entry["hook"] == hook)
        answer = support_for_architecture(served, table.release)
        for ids in ID_LISTS:
            assert sglang_layers_to_capture(MODELS, table.rules, hook, ids, N) == answer.layers_for(ids, N), (
                hook,
                ids,
            )
        checked += 1
    assert checked >= 25  # every hook class the release has, not a sample


# ---- What the tables say for the zoo's classes, read from the sources (see drafting/support_matrix/rules.py)

P, DS = IdRule.PLUS_ONE, IdRule.PLUS_ONE_IF_FIRST_IS_ONE
ZOO_CLASSES: dict[str, tuple[IdRule | None, str | None, str | None]] = {
    # architecture: (id rule, capture in 0.5.14, capture in 0.5.23); None: EAGLE-3 refused
    "LlamaForCausalLM": (P, "residual_stream", "residual_stream"),
    "Qwen2ForCausalLM": (P, "residual_stream", "residual_stream"),
    "Qwen3ForCausalLM": (P, "residual_stream", "residual_stream"),
    "Qwen3MoeForCausalLM": (P, "residual_stream", "residual_stream"),
    "MistralForCausalLM": (P, "residual_stream", "residual_stream"),
    "Phi3ForCausalLM": (P, "residual_stream", "residual_stream"),
    "Gemma3ForCausalLM": (P, "residual_stream", "block_branch"),
    "Gemma3ForConditionalGeneration": (P, "residual_stream", "block_branch"),
    "DeepseekV3ForCausalLM": (DS, "residual_stream", "residual_stream"),
    "KimiK25ForConditionalGeneration": (DS, "residual_stream", "residual_stream"),
    "Qwen2_5_VLForConditionalGeneration": (P, "residual_stream", "residual_stream"),
    "MixtralForCausalLM": (None, None, None),
    "LlavaForConditionalGeneration": (None, None, None),
}


@pytest.mark.parametrize("architecture", sorted(ZOO_CLASSES))
def test_the_zoo_classes_in_both_recorded_releases(architecture: str) -> None:
    rule, on_0514, on_0523 = ZOO_CLASSES[architecture]
    for release, capture in (("0.5.14", on_0514), ("0.5.23", on_0523)):
        support = support_for_architecture(architecture, release)
        assert support.exact
        assert support.known
        assert support.serves_eagle3 is (rule is not None), (architecture, release)
        assert support.id_rule is rule
        assert (support.captures.value if support.captures else None) == capture
        if rule is None:
            refusal = support.refusal()
            assert refusal is not None
            assert CAPTURE_METHOD in refusal
            assert f"SGLang {release}" in refusal


def test_gpt_oss_changed_its_id_rule_between_the_releases() -> None:
    assert support_for_architecture("GptOssForCausalLM", "0.5.14").id_rule is IdRule.PLUS_ONE
    newer = support_for_architecture("GptOssForCausalLM", "0.5.23")
    assert newer.id_rule is IdRule.KEEP_IF_MAX_IS_LAYER_COUNT
    assert newer.layers_for([1, 4, 8], 8) == [1, 4, 8]  # max == n: kept
    assert newer.layers_for([1, 3, 4], 8) == [2, 4, 5]


def test_a_release_not_read_is_answered_by_the_nearest_earlier_one_and_says_so() -> None:
    answered = table_for("0.5.16")
    assert not answered.exact
    assert answered.table.release == "0.5.14"
    assert "0.5.16's model classes were not read" in answered.origin
    refusal = support_for_architecture("MixtralForCausalLM", "0.5.16").refusal()
    assert refusal is not None
    assert "0.5.14" in refusal
    unknown = support_for_architecture("NoSuchModelForCausalLM", "0.5.14")
    assert not unknown.known
    assert "TransformersForCausalLM" in (unknown.refusal() or "")


def test_the_recorded_tables_are_the_files_in_the_package() -> None:
    for path in sorted((Path(__file__).parents[2] / "drafting/support_matrix/releases").glob("*.json")):
        table = load_table(path)
        assert json.loads(table.dumps()) == json.loads(path.read_text())
        assert path.read_text() == table.dumps()  # written by `record`, not by hand-formatting
