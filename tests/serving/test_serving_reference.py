"""The reference engine end to end on the CPU: launch stage → ready → requests → benchmark → stop.

The drafter is fitted briefly to the tiny random target, so acceptance figures here are plumbing checks of
counting and speculation, not quality figures.
"""

from __future__ import annotations

import itertools
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import torch

from contract.params.benchmark import BenchmarkParams
from contract.params.evaluate import EvalParams
from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.context import StageError
from drafting.serving.engine.decoding import DecodeLimits, greedy_decode
from drafting.serving.engine.models import load_models
from drafting.stages import benchmark as benchmark_stage
from drafting.stages import evaluate as evaluate_stage
from drafting.stages import launch as launch_stage
from tests.conftest import free_port
from tests.serving.conftest import RecordingContext, StageThread, start_stage
from testsupport.tiny_pair import TinyPair

DEPTH = 4
NEW_TOKENS = 40


def reference_spec(pair: TinyPair, **fields: object) -> LaunchParams:
    base: dict[str, object] = {
        "engine": "reference",
        "model": str(pair.target),
        "draft": str(pair.draft),
        "depth": DEPTH,
        "max_running_requests": 4,
        "port": free_port(),
        "ready_timeout_s": 120,
        "stop_grace_s": 5,
    }
    return LaunchParams.model_validate({**base, **fields})


@pytest.fixture(scope="module")
def served(tiny_pair: TinyPair, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StageThread]:
    """One speculative reference server for the module, started and stopped by the launch stage."""
    ctx = RecordingContext(work_dir=tmp_path_factory.mktemp("served"))
    stage = start_stage(launch_stage.run, ctx, reference_spec(tiny_pair))
    stage.wait_for(lambda: "ready" in ctx.server_states(), timeout_s=120)
    yield stage
    stage.stop()
    assert ctx.server_states()[-1] == "stopped"
    assert not psutil.pid_exists(ctx.recording.of_type("server")[0]["pid"]), "stop leaves no process behind"


def url_of(stage: StageThread) -> str:
    return str(stage.ctx.recording.of_type("server")[0]["url"])


def generate(url: str, prompt: list[int], *, stream: bool = False) -> dict:
    body = {
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True},
        "stream": stream,
    }
    response = httpx.post(f"{url}/generate", json=body, timeout=120)
    assert response.status_code == 200, response.text
    if not stream:
        return response.json()
    chunks = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert chunks[-1] == "[DONE]"
    return httpx.Response(200, content=chunks[-2]).json()


def test_speculative_output_equals_the_targets_plain_greedy_output(
    served: StageThread, tiny_pair: TinyPair
) -> None:
    models = load_models(str(tiny_pair.target), None, device=torch.device("cpu"), dtype=torch.float32)
    for prompt in tiny_pair.prompts:
        expected = greedy_decode(models.target, prompt, DecodeLimits(NEW_TOKENS)).output_ids
        answer = generate(url_of(served), prompt)
        assert answer["output_ids"] == expected
        assert answer["meta_info"]["completion_tokens"] == NEW_TOKENS
        assert generate(url_of(served), prompt, stream=True)["output_ids"] == expected


def test_meta_info_acceptance_matches_the_engines_own_counters(
    served: StageThread, tiny_pair: TinyPair
) -> None:
    url = url_of(served)
    assert httpx.post(f"{url}/flush_cache", timeout=30).status_code == 200
    metas = [generate(url, prompt)["meta_info"] for prompt in tiny_pair.prompts]
    completion = sum(m["completion_tokens"] for m in metas)
    verify = sum(m["spec_verify_ct"] for m in metas)
    correct = sum(m["spec_num_correct_drafts"] for m in metas)
    for meta in metas:
        assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
    info = httpx.get(f"{url}/server_info", timeout=30).json()
    state = info["internal_states"][0]
    assert info["engine"] == "eyas-reference-engine"
    assert state["spec_total_completion_tokens"] == completion
    assert state["spec_total_verify_ct"] == verify
    assert state["avg_spec_accept_length"] == pytest.approx((correct + verify) / verify)
    assert completion / verify > 1.0, "the fitted drafter gets some drafts accepted (plumbing check)"


def test_log_lines_are_sglangs_and_labelled_as_the_reference_engine(
    served: StageThread, tiny_pair: TinyPair
) -> None:
    for prompt in tiny_pair.prompts * 2:
        generate(url_of(served), prompt)
    served.wait_for(lambda: any("accept len:" in line for line in served.ctx.lines), timeout_s=30)
    lines = served.ctx.lines
    assert any("eyas reference engine (NOT SGLang)" in line for line in lines)
    assert any("The server is fired up and ready to roll!" in line for line in lines)
    decode = next(line for line in lines if "Decode batch, #running-req: 1" in line)
    assert "accept rate:" in decode
    assert "cuda graph: False, gen throughput (token/s):" in decode


def test_benchmark_against_the_running_server(
    served: StageThread, ctx: RecordingContext, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"text": f"prompt number {i}"}) for i in range(6)))
    params = BenchmarkParams(
        url=url_of(served),
        prompts=str(prompts),
        max_new_tokens=16,
        concurrency=2,
        warmup_requests=1,
        send_as="input_ids",
    )
    result = benchmark_stage.run(ctx, params)
    assert result["failed_requests"] == 0
    assert result["timing"] == "stream"
    assert len(result["per_request"]) == 6
    assert result["completion_tokens"] == 6 * 16
    assert result["accept_len"] == pytest.approx(96 / result["spec_verify_ct"], abs=1e-4)
    assert result["server_accept_len"] is not None
    assert result["ttft_p50_ms"] is not None
    assert result["itl_p99_ms"] is not None


def test_offline_eval_predicts_what_the_engine_measures(
    served: StageThread, ctx: RecordingContext, tiny_pair: TinyPair, tmp_path: Path
) -> None:
    prompts = tmp_path / "ids.jsonl"
    prompts.write_text("\n".join(f'{{"input_ids": {p}}}' for p in tiny_pair.prompts))
    params = EvalParams(
        model=str(tiny_pair.target),
        draft=str(tiny_pair.draft),
        depths=[DEPTH, 1],
        prompts=str(prompts),
        max_new_tokens=NEW_TOKENS,
        device="cpu",
    )
    rows = {row["depth"]: row for row in evaluate_stage.run(ctx, params)["depths"]}
    metas = [generate(url_of(served), prompt)["meta_info"] for prompt in tiny_pair.prompts]
    served_accept = sum(m["completion_tokens"] for m in metas) / sum(m["spec_verify_ct"] for m in metas)
    assert rows[DEPTH]["accept_length_meta"] == pytest.approx(served_accept)
    assert rows[DEPTH]["outputs_match"] is True
    reach = rows[DEPTH]["position_reach_rate"]
    assert len(reach) == DEPTH
    assert rows[DEPTH]["accept_length"] == pytest.approx(1 + sum(reach), abs=1e-3)
    assert all(a >= b for a, b in itertools.pairwise(reach))
    assert rows[1]["accept_length"] <= rows[DEPTH]["accept_length"]


def test_a_port_taken_before_launch_is_refused_by_the_checks(
    ctx: RecordingContext, tiny_pair: TinyPair
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        with pytest.raises(StageError) as caught:
            launch_stage.run(ctx, reference_spec(tiny_pair, port=held.getsockname()[1]))
    assert caught.value.reason is TerminationReason.LAUNCH_CHECK_FAILED
    assert "PORT_IN_USE" in caught.value.message


def test_a_model_that_fails_to_load_kills_the_launch_with_its_log(
    ctx: RecordingContext, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    params = LaunchParams(engine="reference", model=str(broken), port=free_port(), ready_timeout_s=120)
    with pytest.raises(StageError) as caught:
        launch_stage.run(ctx, params)
    failure = caught.value
    assert failure.reason is TerminationReason.SERVER_DIED
    assert failure.details["exit_code"] == 1
    assert any("Initialization failed" in line for line in failure.details["log"])
    pid = ctx.recording.of_type("server")[0]["pid"]
    assert not psutil.pid_exists(pid)
