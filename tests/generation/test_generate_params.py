"""GenerateParams: the engine serves the target, GPU needs come from the engine, hostile or conflicting
values are refused with a message that says what is wrong."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contract.params.generate import GenerateParams
from contract.stages import STAGES

BASE: dict[str, Any] = {
    "target": "/data/models/t",
    "prompts": "/data/prompts.jsonl",
    "output": "/data/out/conversations.jsonl",
}


def parse(**values: Any) -> GenerateParams:
    return GenerateParams.model_validate({**BASE, **values})


def test_the_engine_serves_the_target_and_decides_the_gpus() -> None:
    auto = parse()
    assert auto.engine.model == BASE["target"]
    assert auto.engine.engine == "auto"
    assert auto.gpus_optional()
    reference = parse(engine={"engine": "reference"})
    assert (reference.needs_gpus(), reference.gpus_needed()) == (False, 0)
    sglang = parse(engine={"engine": "sglang", "tp_size": 2})
    assert (sglang.needs_gpus(), sglang.gpus_needed()) == (True, 2)
    assert BASE["target"] in sglang.host_paths()
    assert set(sglang.host_paths()) >= {BASE["prompts"], BASE["output"]}


def test_the_registry_knows_the_kind() -> None:
    spec = STAGES["generate"]
    assert spec.params is GenerateParams
    assert spec.module == "drafting.stages.generate"
    params = spec.parse({**BASE, "self_prompts": {"count": 5}, "prompts": None})
    assert isinstance(params, GenerateParams)
    assert params.self_prompts is not None
    assert params.self_prompts.attempts == 20


def test_openers_are_a_list_or_the_named_set_and_lose_surrounding_spaces() -> None:
    listed = parse(self_prompts={"count": 2, "openers": ["  Write a haiku about ", "Solve:"]})
    assert listed.self_prompts is not None
    assert listed.self_prompts.openers == ["Write a haiku about", "Solve:"]
    named = parse(self_prompts={"count": 2, "openers": "tasks"})
    assert named.self_prompts is not None
    assert named.self_prompts.openers == "tasks"
    assert parse(self_prompts={"count": 2}).self_prompts.openers == []  # type: ignore[union-attr]


def test_a_round_trip_through_json_keeps_the_params() -> None:
    params = parse(temperature=0.0, multi_turn=False, self_prompts={"count": 3, "min_chars": 4})
    assert GenerateParams.model_validate_json(params.model_dump_json()) == params


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"output": "/data/../etc/passwd"}, "'..'"),
        ({"prompts": "relative/prompts.jsonl"}, "absolute"),
        ({"output": "/data/out\x00.jsonl"}, "control"),
        ({"target": "/data/\ud800model"}, "surrogate"),
        ({"output": "/data/\u202eout.jsonl"}, "bidirectional"),
        ({"temperature": float("nan")}, "finite"),
        ({"top_p": float("inf")}, "finite"),
        ({"self_prompts": {"count": 2, "temperature": float("-inf")}}, "finite"),
        ({"top_p": 0}, "greater than 0"),
        ({"temperature": -0.1}, "greater than or equal to 0"),
        ({"seed": 2**63}, "less than or equal to"),
        ({"concurrency": 0}, "greater than or equal to 1"),
        ({"prompts": None}, "nothing to generate from"),
        ({"prompts": None, "limit": 3, "self_prompts": {"count": 1}}, "limit applies to prompts"),
        ({"engine": {"model": "/data/models/other"}}, "is not the target"),
        ({"engine": {"draft": "/data/draft"}}, "serves the target alone"),
        ({"engine": {"dry_run": True}}, "needs a running server"),
        ({"output": BASE["prompts"]}, "would overwrite an input"),
        ({"self_prompts": {"count": 2, "min_chars": 50, "max_chars": 10}}, "above max_chars"),
        ({"self_prompts": {"count": 20, "max_attempts": 5}}, "below count"),
        ({"self_prompts": {"count": 2, "bogus": 1}}, "Extra inputs"),
        ({"self_prompts": {"count": 2, "openers": ["Write", "  "]}}, "must have text"),
        ({"self_prompts": {"count": 2, "openers": ["Write\nrm -rf"]}}, "control"),
        ({"self_prompts": {"count": 2, "openers": ["Write \u202eevil"]}}, "bidirectional"),
        ({"self_prompts": {"count": 2, "openers": ["Write \ud800"]}}, "surrogate"),
        ({"self_prompts": {"count": 2, "openers": ["w" * 201]}}, "longer than 200"),
        ({"self_prompts": {"count": 2, "openers": ["a"] * 10_001}}, "at most 10000"),
        ({"self_prompts": {"count": 2, "openers": "chores"}}, "'tasks'"),
        ({"engine": {"extra_args": ["--model-path", "/x"]}}, "rendered by eyas"),
        ({"engine": {"env": {"LD_PRELOAD": "/x.so"}}}, "not allowed"),
        ({"surprise": True}, "Extra inputs"),
    ],
)
def test_hostile_or_conflicting_params_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        parse(**values)
    assert message in str(refused.value)
