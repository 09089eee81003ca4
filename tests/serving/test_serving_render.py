"""Rendering a launch spec and the pure checks (no host): argv, env, findings with codes and fixes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contract.params.launch import LaunchParams
from drafting.findings import Severity
from drafting.serving.launch.render import HostFacts, RenderedLaunch, render_launch
from drafting.serving.launch.sglang_parser import parse_with_sglang, sglang_parser

EAGLE3_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"]}


def spec(**fields: object) -> LaunchParams:
    base: dict[str, object] = {"engine": "sglang", "model": "/models/target", "draft": "/models/draft"}
    return LaunchParams.model_validate({**base, **fields})


def codes(rendered: RenderedLaunch, severity: Severity | None = None) -> set[str]:
    return {f.code for f in rendered.findings if severity is None or f.severity is severity}


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_depth_renders_a_chain_with_all_three_flags() -> None:
    rendered = render_launch(spec(depth=16, max_running_requests=64), draft_config=EAGLE3_DRAFT)
    argv = rendered.argv
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert flag_value(argv, "--speculative-num-steps") == "16"
    assert flag_value(argv, "--speculative-eagle-topk") == "1"
    assert flag_value(argv, "--speculative-num-draft-tokens") == "17"
    assert flag_value(argv, "--speculative-algorithm") == "EAGLE3"
    assert flag_value(argv, "--speculative-draft-model-path") == "/models/draft"
    assert rendered.errors == []


def test_sglangs_own_parser_accepts_everything_eyas_renders() -> None:
    parser = sglang_parser()
    assert parser is not None, "sglang is installed in the venv (--no-deps) for exactly this check"
    params = spec(
        depth=5, tp_size=8, mem_fraction_static=0.88, context_length=8192, max_running_requests=64, port=31000
    )
    rendered = render_launch(params, draft_config=EAGLE3_DRAFT)
    outcome = parse_with_sglang(parser, rendered.argv[3:])
    assert outcome.unknown == []
    assert outcome.error is None
    assert "SGLANG_PARSER_UNAVAILABLE" not in codes(rendered)


def test_sglangs_parser_rejects_num_speculative_tokens_with_the_fix() -> None:
    parser = sglang_parser()
    assert parser is not None
    assert parse_with_sglang(parser, ["--model-path", "/m", "--num-speculative-tokens", "16"]).unknown == [
        "--num-speculative-tokens"
    ]
    rendered = render_launch(spec(depth=16, extra_args=["--num-speculative-tokens", "16"]))
    [finding] = [f for f in rendered.findings if f.code == "UNKNOWN_FLAG"]
    assert finding.severity is Severity.ERROR
    assert "--speculative-num-steps" in finding.fix


def test_a_typo_flag_is_unknown_to_sglangs_parser() -> None:
    rendered = render_launch(spec(depth=3, extra_args=["--cuda-grph-max-bs", "8"]))
    [finding] = [f for f in rendered.findings if f.code == "UNKNOWN_FLAG"]
    assert "--cuda-grph-max-bs" in finding.message


def test_a_value_of_the_wrong_type_is_a_parse_error() -> None:
    rendered = render_launch(spec(depth=3, extra_args=["--decode-log-interval", "often"]))
    assert "SGLANG_PARSE_ERROR" in codes(rendered, Severity.ERROR)


def test_ignored_flag_is_a_warning() -> None:
    rendered = render_launch(spec(depth=3, extra_args=["--num-continuous-decode-steps", "4"]))
    assert "IGNORED_FLAG" in codes(rendered, Severity.WARNING)
    assert rendered.errors == [] or all(f.code != "IGNORED_FLAG" for f in rendered.errors)


@pytest.mark.parametrize(
    "smuggled",
    [
        ["--speculative-num-steps", "4"],
        ["--speculative-num-draft", "5"],  # an abbreviation argparse would accept
        ["--port=31000"],
        ["--tensor-parallel-size", "2"],
        ["--model", "/elsewhere"],
    ],
)
def test_extra_args_cannot_set_a_flag_eyas_renders(smuggled: list[str]) -> None:
    with pytest.raises(ValidationError, match="extra_args"):  # refused at submit time (a 422)
        spec(depth=3, extra_args=smuggled)
    # and again by the launch checks, for a spec that skipped validation
    rendered = render_launch(unvalidated(depth=3, extra_args=smuggled))
    assert "FLAG_OWNED_BY_EYAS" in codes(rendered, Severity.ERROR)


def unvalidated(**fields: object) -> LaunchParams:
    base: dict[str, object] = {"engine": "sglang", "model": "/models/target", "draft": "/models/draft"}
    return LaunchParams.model_construct(**{**LaunchParams(**base).model_dump(), **fields})


def test_owned_flag_abbreviations_are_refused_without_sglangs_parser_too() -> None:
    rendered = render_launch(
        unvalidated(depth=3, extra_args=["--speculative-num-draft", "5"]), use_sglang_parser=False
    )
    assert "FLAG_OWNED_BY_EYAS" in codes(rendered, Severity.ERROR)
    assert "SGLANG_PARSER_UNAVAILABLE" in codes(rendered, Severity.INFO)


def test_config_file_flag_is_forbidden_and_file_values_must_be_clean_absolute_paths() -> None:
    smuggled = ["--config", "/etc/sglang.yaml", "--chat-template", "relative.jinja"]
    with pytest.raises(ValidationError, match="--config"):
        spec(depth=3, extra_args=smuggled)
    rendered = render_launch(unvalidated(depth=3, extra_args=smuggled))
    assert {"FORBIDDEN_FLAG", "PATH_FLAG_INVALID"} <= codes(rendered, Severity.ERROR)


def test_absolute_file_values_become_host_paths_for_the_allowed_roots_check() -> None:
    params = spec(
        depth=3, extra_args=["--chat-template", "/models/chat.jinja", "--decode-log-interval", "10"]
    )
    assert "/models/chat.jinja" in params.host_paths()
    assert {"/models/target", "/models/draft"} <= set(params.host_paths())
    assert render_launch(params).errors == []


def test_partial_steps_topk_tokens_is_an_error_naming_what_is_missing() -> None:
    rendered = render_launch(spec(num_steps=4, eagle_topk=1))
    [finding] = [f for f in rendered.findings if f.code == "SPEC_PARAMS_PARTIAL"]
    assert "num_draft_tokens" in finding.message
    assert finding.severity is Severity.ERROR
    assert "--speculative-num-steps" not in rendered.argv


def test_depth_and_explicit_shape_together_is_an_error() -> None:
    rendered = render_launch(spec(depth=4, num_steps=4, eagle_topk=1, num_draft_tokens=5))
    assert "SPEC_DEPTH_AND_EXPLICIT" in codes(rendered, Severity.ERROR)


def test_explicit_tree_renders_as_given_and_an_impossible_tree_is_an_error() -> None:
    tree = render_launch(spec(num_steps=5, eagle_topk=4, num_draft_tokens=8, max_running_requests=8))
    assert flag_value(tree.argv, "--speculative-eagle-topk") == "4"
    assert tree.errors == []
    impossible = render_launch(spec(num_steps=1, eagle_topk=2, num_draft_tokens=8))
    assert "DRAFT_TOKENS_EXCEED_TREE" in codes(impossible, Severity.ERROR)


def test_chain_with_wrong_draft_token_count_is_corrected_with_a_warning() -> None:
    rendered = render_launch(spec(num_steps=4, eagle_topk=1, num_draft_tokens=9))
    assert "DRAFT_TOKENS_ADJUSTED" in codes(rendered, Severity.WARNING)
    assert flag_value(rendered.argv, "--speculative-num-draft-tokens") == "5"


def test_speculative_fields_without_a_draft_are_an_error() -> None:
    rendered = render_launch(spec(draft=None, depth=3))
    assert "SPEC_WITHOUT_DRAFT" in codes(rendered, Severity.ERROR)


def test_no_draft_renders_a_baseline_without_speculative_flags() -> None:
    rendered = render_launch(spec(draft=None))
    assert not [a for a in rendered.argv if a.startswith("--speculative")]
    assert rendered.errors == []
    assert "MAX_RUNNING_REQUESTS_DEFAULT" not in codes(rendered)


def test_no_depth_renders_a_chain_of_three_and_says_so() -> None:
    rendered = render_launch(spec(max_running_requests=8))
    assert flag_value(rendered.argv, "--speculative-num-steps") == "3"
    assert "SPEC_DEPTH_DEFAULT" in codes(rendered, Severity.INFO)


def test_eagle_given_for_an_eagle3_draft_is_a_mismatch() -> None:
    rendered = render_launch(spec(depth=3, algorithm="EAGLE"), draft_config=EAGLE3_DRAFT)
    [finding] = [f for f in rendered.findings if f.code == "ALGORITHM_MISMATCH"]
    assert "EAGLE3" in finding.fix


def test_algorithm_is_inferred_from_the_draft_architecture() -> None:
    eagle_draft = {"architectures": ["LlamaForCausalLMEagle"]}
    rendered = render_launch(spec(depth=3), draft_config=eagle_draft)
    assert flag_value(rendered.argv, "--speculative-algorithm") == "EAGLE"
    unchecked = render_launch(spec(depth=3))
    assert "ALGORITHM_UNCHECKED" in codes(unchecked, Severity.INFO)


def test_an_unconverted_or_unknown_draft_architecture_is_an_error() -> None:
    speculators = render_launch(spec(depth=3), draft_config={"architectures": ["Eagle3Speculator"]})
    assert "DRAFT_NOT_CONVERTED" in codes(speculators, Severity.ERROR)
    unknown = render_launch(spec(depth=3), draft_config={"architectures": ["LlamaForCausalLM"]})
    assert "DRAFT_ARCHITECTURE_UNKNOWN" in codes(unknown, Severity.ERROR)


def test_unset_max_running_requests_warns_about_48() -> None:
    rendered = render_launch(spec(depth=3))
    [finding] = [f for f in rendered.findings if f.code == "MAX_RUNNING_REQUESTS_DEFAULT"]
    assert "48" in finding.message


def test_quiet_log_level_warns_that_acceptance_lines_disappear() -> None:
    rendered = render_launch(spec(depth=3, log_level="warning"))
    assert "LOG_LEVEL_HIDES_ACCEPTANCE" in codes(rendered, Severity.WARNING)


def test_env_is_allow_listed_and_passed_through() -> None:
    params = spec(depth=3, env={"NCCL_DEBUG": "INFO", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    rendered = render_launch(params)
    assert rendered.env["NCCL_DEBUG"] == "INFO"
    assert rendered.env["PYTHONUNBUFFERED"] == "1"
    for bad_env in (
        {"LD_PRELOAD": "/x.so"},
        {"PYTHONPATH": "/x"},
        {"CUDA_VISIBLE_DEVICES": "3"},
        {"NCCL_X": "a\nb"},
    ):
        with pytest.raises(ValidationError):
            spec(env=bad_env)


def test_extra_args_with_control_characters_or_a_bad_host_are_refused_at_validation() -> None:
    with pytest.raises(ValidationError):
        spec(extra_args=["--foo\n--bar"])
    with pytest.raises(ValidationError):
        spec(host="127.0.0.1; rm -rf /")
    with pytest.raises(ValidationError):
        spec(model="relative/model")


def test_reference_engine_renders_its_own_module_and_refuses_trees() -> None:
    rendered = render_launch(spec(engine="reference", depth=4, extra_args=["--enable-metrics"]))
    assert rendered.argv[1:3] == ["-m", "drafting.serving.engine.reference_engine"]
    assert flag_value(rendered.argv, "--depth") == "4"
    assert "--enable-metrics" not in rendered.argv
    assert "EXTRA_ARGS_IGNORED" in codes(rendered, Severity.INFO)
    tree = render_launch(spec(engine="reference", num_steps=3, eagle_topk=2, num_draft_tokens=4))
    assert "REFERENCE_TREE_UNSUPPORTED" in codes(tree, Severity.ERROR)


def test_auto_engine_resolves_on_the_host() -> None:
    cpu_host = HostFacts(python="/venv/bin/python", sglang_version=None, gpu_count=0, on_host=True)
    gpu_host = HostFacts(python="/venv/bin/python", sglang_version="0.5.14", gpu_count=1, on_host=True)
    assert render_launch(spec(engine="auto", depth=3), host=cpu_host).engine == "reference"
    assert render_launch(spec(engine="auto", depth=3), host=gpu_host).engine == "sglang"
    away = render_launch(spec(engine="auto", depth=3))
    assert away.engine == "sglang"
    assert "ENGINE_AUTO_ASSUMED" in codes(away)


def test_wildcard_bind_is_reached_on_loopback() -> None:
    assert render_launch(spec(depth=3, host="0.0.0.0", port=31001)).url == "http://127.0.0.1:31001"
    assert flag_value(render_launch(spec(depth=3, host="0.0.0.0")).argv, "--host") == "0.0.0.0"


@pytest.mark.parametrize("flag", ["--help", "-h", "--version", "--hel", "--help=x"])
def test_flags_that_print_and_exit_are_refused_with_and_without_sglangs_parser(flag: str) -> None:
    with pytest.raises(ValidationError, match="exits"):
        spec(depth=3, extra_args=[flag])
    for use_parser in (True, False):
        rendered = render_launch(unvalidated(depth=3, extra_args=[flag]), use_sglang_parser=use_parser)
        assert "FLAG_EXITS_WITHOUT_SERVING" in codes(rendered, Severity.ERROR), rendered.findings


def test_sglangs_parser_reports_an_exiting_action_instead_of_exiting() -> None:
    parser = sglang_parser()
    assert parser is not None
    outcome = parse_with_sglang(parser, ["--model-path", "/m", "--help"])  # SystemExit here would end pytest
    assert outcome.exit_status == 0
    assert outcome.error is None
    assert parse_with_sglang(parser, ["--model-path", "/m"]).exit_status is None
