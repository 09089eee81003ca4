"""Sweep configs and CUDA graphs at submit time: SGLang's chain/tree rules, conflicting inputs refused with
the field to use, and what eyas renders for them (checked by SGLang's own parser)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contract.params.benchmark import BenchmarkParams, SpecConfig, tree_candidates
from contract.params.launch import LaunchParams
from drafting.serving.benchmark.sweep_servers import server_spec
from drafting.serving.launch.render import render_launch
from drafting.serving.launch.sglang_parser import parse_with_sglang, sglang_parser

EAGLE3_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"]}
LAUNCH = {"engine": "sglang", "model": "/models/target", "draft": "/models/draft", "max_running_requests": 8}


def sweep(**fields: Any) -> BenchmarkParams:
    return BenchmarkParams.model_validate({"mode": "sweep", "launch": LAUNCH, **fields})


def refusal(build: Any, **fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        build(**fields)
    return str(caught.value)


def test_depths_are_shorthand_for_chain_configs_and_the_default_is_16_10_5() -> None:
    assert [c.label for c in sweep(depths=[5, 3]).sweep_configs()] == ["5,1,6", "3,1,4"]
    assert [c.label for c in sweep().sweep_configs()] == ["16,1,17", "10,1,11", "5,1,6"]
    configs = sweep(
        configs=[{"steps": 5, "topk": 4, "draft_tokens": 8}, {"steps": 3, "topk": 1, "draft_tokens": 4}]
    )
    assert [(c.label, c.is_chain) for c in configs.sweep_configs()] == [("5,4,8", False), ("3,1,4", True)]


def test_configs_and_depths_together_are_a_conflict() -> None:
    message = refusal(sweep, depths=[5], configs=[{"steps": 5, "topk": 1, "draft_tokens": 6}])
    assert "give configs or depths (shorthand for chain configs), not both" in message


def test_a_chain_verifies_steps_plus_one_tokens() -> None:
    message = refusal(SpecConfig, steps=5, topk=1, draft_tokens=8)
    assert (
        "a chain (topk 1) verifies steps + 1 = 6 draft tokens; SGLang would silently change 8 to 6" in message
    )
    assert SpecConfig(steps=5, topk=1, draft_tokens=6) == SpecConfig.chain(5)


def test_a_tree_verifies_at_most_its_candidates_plus_one() -> None:
    # 3 steps × topk 2: 2 candidates at the first step, 4 at each later one = 10; SGLang keeps the best 10.
    assert tree_candidates(3, 2) == 10
    assert SpecConfig(steps=3, topk=2, draft_tokens=11).label == "3,2,11"
    message = refusal(SpecConfig, steps=3, topk=2, draft_tokens=12)
    assert (
        "a tree of 3 steps × topk 2 proposes at most 10 tokens, so draft_tokens can be at most 11" in message
    )
    assert SpecConfig(steps=5, topk=4, draft_tokens=8).label == "5,4,8"  # SGLang's Llama default
    assert SpecConfig(steps=1, topk=8, draft_tokens=9).label == "1,8,9"
    assert "draft_tokens can be at most 9" in refusal(SpecConfig, steps=1, topk=8, draft_tokens=10)


def test_config_fields_are_bounded_and_unknown_fields_refused() -> None:
    assert "greater than or equal to 2" in refusal(SpecConfig, steps=1, topk=2, draft_tokens=1)
    assert "Extra inputs are not permitted" in refusal(SpecConfig, steps=1, topk=1, draft_tokens=2, depth=1)


def test_repeated_configs_and_a_chosen_config_outside_them_are_refused() -> None:
    chain = {"steps": 3, "topk": 1, "draft_tokens": 4}
    assert "configs repeat" in refusal(sweep, configs=[chain, chain])
    assert "the chosen config 5,1,6 is not one of the configs ['3,1,4']" in refusal(
        sweep, configs=[chain], chosen_depth=5
    )
    assert "not both" in refusal(sweep, depths=[3], chosen_depth=3, chosen_config=chain)
    assert sweep(depths=[3], chosen_config=chain).chosen() == SpecConfig.chain(3)


def test_one_round_is_enough_for_an_interval_over_requests() -> None:
    """The interval resamples requests, each paired with its baseline run: one round has an interval."""
    assert sweep().repeats == 5
    assert sweep(repeats=1).repeats == 1
    assert "greater than or equal to 1" in refusal(sweep, repeats=0)


def test_concurrencies_must_hold_the_gate_s_concurrency_once() -> None:
    assert sweep().sweep_concurrencies() == [1]
    assert sweep(concurrency=8).sweep_concurrencies() == [8]
    assert sweep(concurrencies=[1, 8, 32]).sweep_concurrencies() == [1, 8, 32]
    assert "the gate judges at concurrency 1, which is not among concurrencies [8, 32]" in refusal(
        sweep, concurrencies=[8, 32]
    )
    assert "concurrencies repeat: [1, 8, 8]" in refusal(sweep, concurrencies=[1, 8, 8])
    assert "greater than 0" in refusal(sweep, max_speedup_half_width=0)
    assert "greater than or equal to 1" in refusal(sweep, accept_lengths={5: 0.5})


def test_the_reference_engine_refuses_a_tree_at_submit_time() -> None:
    message = refusal(
        BenchmarkParams.model_validate,
        obj={
            "mode": "sweep",
            "launch": {**LAUNCH, "engine": "reference"},
            "configs": [{"steps": 3, "topk": 2, "draft_tokens": 6}],
        },
    )
    assert "the reference engine drafts chains only (topk 1); ['3,2,6'] are trees" in message


def launch(**fields: Any) -> LaunchParams:
    return LaunchParams.model_validate({**LAUNCH, "depth": 3, **fields})


def test_cuda_graphs_are_on_by_default_and_nothing_turns_them_off_in_the_argv() -> None:
    rendered = render_launch(launch(), draft_config=EAGLE3_DRAFT)
    assert launch().cuda_graphs is True
    assert not any("cuda-graph" in arg for arg in rendered.argv)
    assert rendered.cuda_graphs == {"enabled": True, "off_reason": None}
    assert rendered.as_dict()["cuda_graphs"] == {"enabled": True, "off_reason": None}


def test_cuda_graphs_off_needs_a_reason_and_renders_the_flag_with_a_warning() -> None:
    assert "cuda_graphs is false: say why in cuda_graphs_off_reason" in refusal(launch, cuda_graphs=False)
    assert "say why" in refusal(launch, cuda_graphs=False, cuda_graphs_off_reason="  ")
    assert "cuda_graphs_off_reason is set but cuda_graphs is true" in refusal(
        launch, cuda_graphs_off_reason="capture OOMs"
    )
    rendered = render_launch(
        launch(cuda_graphs=False, cuda_graphs_off_reason="graph capture OOMs at bs 48"),
        draft_config=EAGLE3_DRAFT,
    )
    assert rendered.argv.count("--disable-cuda-graph") == 1
    assert rendered.cuda_graphs == {"enabled": False, "off_reason": "graph capture OOMs at bs 48"}
    [finding] = [f for f in rendered.findings if f.code == "CUDA_GRAPHS_OFF"]
    assert "graph capture OOMs at bs 48" in finding.message
    assert rendered.errors == []


@pytest.mark.parametrize(
    "extra_args",
    [
        ["--disable-cuda-graph"],
        ["--disable-decode-cuda-graph"],
        ["--disable-decode-cuda"],  # argparse would expand the unique prefix
        ["--cuda-graph-backend-decode", "disabled"],
        ["--cuda-graph-backend-decode=disabled"],
        ["--cuda-graph-config", '{"decode": {"backend": "disabled"}}'],
    ],
)
def test_extra_args_that_turn_graphs_off_are_refused_pointing_at_the_field(extra_args: list[str]) -> None:
    message = refusal(launch, extra_args=extra_args)
    assert "set cuda_graphs false with cuda_graphs_off_reason instead" in message


def test_extra_args_may_tune_graphs_but_not_contradict_the_field() -> None:
    allowed = launch(extra_args=["--cuda-graph-max-bs-decode", "8", "--disable-cuda-graph-padding"])
    assert allowed.cuda_graphs is True
    assert launch(extra_args=["--disable-prefill-cuda-graph"]).cuda_graphs is True  # decode graphs stay on
    message = refusal(
        launch,
        cuda_graphs=False,
        cuda_graphs_off_reason="debugging",
        extra_args=["--cuda-graph-backend-decode", "full"],
    )
    assert "--cuda-graph-backend-decode full asks for decode graphs but cuda_graphs is false" in message


def test_the_api_refuses_the_conflict_as_a_validation_error_naming_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        BenchmarkParams.model_validate(
            {"mode": "sweep", "launch": {**LAUNCH, "extra_args": ["--disable-cuda-graph"]}, "depths": [3]}
        )
    [error] = caught.value.errors()
    assert error["loc"] == ("launch",)
    assert "--disable-cuda-graph turns CUDA graphs off behind the `cuda_graphs` field" in error["msg"]


def test_sglangs_own_parser_accepts_every_server_a_sweep_renders() -> None:
    parser = sglang_parser()
    assert parser is not None, "sglang is installed in the venv (--no-deps) for exactly this check"
    params = sweep(
        configs=[{"steps": 5, "topk": 1, "draft_tokens": 6}, {"steps": 4, "topk": 4, "draft_tokens": 16}],
        launch={**LAUNCH, "cuda_graphs": False, "cuda_graphs_off_reason": "profiling launch overhead"},
    )
    assert params.launch is not None
    specs = [server_spec(params.launch, None, port=31000, mem_fraction=0.4)]
    specs += [server_spec(params.launch, c, port=31001, mem_fraction=0.7) for c in params.sweep_configs()]
    for spec in specs:
        rendered = render_launch(spec, draft_config=EAGLE3_DRAFT)
        assert rendered.errors == [], rendered.findings
        outcome = parse_with_sglang(parser, rendered.argv[3:])
        assert outcome.unknown == []
        assert outcome.error is None
        assert "--disable-cuda-graph" in rendered.argv
    tree = render_launch(specs[2], draft_config=EAGLE3_DRAFT).argv
    assert tree[tree.index("--speculative-eagle-topk") + 1] == "4"
    assert tree[tree.index("--speculative-num-draft-tokens") + 1] == "16"
    assert tree[tree.index("--mem-fraction-static") + 1] == "0.7"
    baseline = render_launch(specs[0], draft_config=EAGLE3_DRAFT).argv
    assert not any(arg.startswith("--speculative") for arg in baseline)


def test_benchmark_prompts_are_a_path_or_a_named_set() -> None:
    named = BenchmarkParams(mode="single", url="http://127.0.0.1:30000", prompts="mtbench")
    assert named.prompts == "mtbench"
    assert named.host_paths() == []  # a set's name is not a path to check against the host's roots
    with pytest.raises(ValidationError, match="named set"):
        BenchmarkParams(mode="single", url="http://127.0.0.1:30000", prompts="sharegpt")
    with pytest.raises(ValidationError):
        BenchmarkParams(mode="single", url="http://127.0.0.1:30000", prompts="relative/p.jsonl")
