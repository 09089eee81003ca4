"""A single-mode benchmark of a chat prompt set: rendered with the chat template of the tokenizer the server
reports, sent as token ids, acceptance reported per category (a reference server on the demo target)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from cli.demo.constructed import build_tokenizer, successor_target
from contract.params.benchmark import BenchmarkParams
from contract.params.launch import LaunchParams
from drafting.ml.drafter import Eagle3Drafter, default_aux_layers, save_drafter
from drafting.prompting.chat import render_ids
from drafting.serving.prompts.chat_source import server_tokenizer_folder
from drafting.stages import benchmark as benchmark_stage
from drafting.stages import launch as launch_stage
from tests.conftest import free_port
from tests.serving.conftest import RecordingContext, StageThread, start_stage

QUESTIONS = [("w1 w2 w3", "alpha"), ("w5 w6", "beta"), ("w9 w10 w11 w12", "alpha")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("chatbench")
    target = successor_target(root / "target")
    config = json.loads((target / "config.json").read_text())
    torch.manual_seed(0)
    drafter = Eagle3Drafter.from_target_config(
        config, draft_vocab_size=int(config["vocab_size"]), aux_layer_ids=default_aux_layers(8)
    )
    save_drafter(drafter, root / "draft", target_config=config)
    spec = LaunchParams.model_validate(
        {"engine": "reference", "model": str(target), "draft": str(root / "draft"), "depth": 3,
         "port": free_port(), "ready_timeout_s": 120, "stop_grace_s": 5}
    )  # fmt: skip
    ctx = RecordingContext(work_dir=root)
    stage: StageThread = start_stage(launch_stage.run, ctx, spec)
    stage.wait_for(lambda: "ready" in ctx.server_states(), timeout_s=120)
    yield str(ctx.recording.of_type("server")[0]["url"]), target
    stage.stop()


def test_chat_prompts_are_rendered_sent_as_ids_and_reported_per_category(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    url, target = server
    assert server_tokenizer_folder(url) == str(target)
    prompts = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "user", "content": q}], "category": c} for q, c in QUESTIONS]
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    params = BenchmarkParams(url=url, prompts=str(prompts), max_new_tokens=8, warmup_requests=0)
    result = benchmark_stage.run(RecordingContext(work_dir=tmp_path), params)
    assert result["failed_requests"] == 0
    tokenizer = build_tokenizer()
    expected = [len(render_ids(tokenizer, [{"role": "user", "content": q}])[1]) for q, _ in QUESTIONS]
    assert [r["prompt_tokens"] for r in result["per_request"]] == expected  # the template's ids, no BOS added
    assert result["prompt_set"]["chat_prompts"] == 3
    assert "raw_text_note" not in result["prompt_set"]  # every prompt went through the template
    assert result["prompt_set"]["categories"] == ["alpha", "beta"]
    by_category = result["by_category"]
    assert list(by_category) == ["alpha", "beta"]
    assert (by_category["alpha"]["prompts"], by_category["beta"]["prompts"]) == (2, 1)
    verify = [r["spec_verify_ct"] for r in result["per_request"]]
    assert by_category["beta"]["verify_steps"] == verify[1]
    assert by_category["beta"]["accept_length_meta"] == pytest.approx(8 / verify[1], abs=1e-4)


def test_raw_text_prompts_to_a_chat_target_are_flagged_in_the_log_and_the_result(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = server
    prompts = tmp_path / "raw.jsonl"
    prompts.write_text("\n".join(json.dumps({"text": q}) for q, _ in QUESTIONS) + "\n")
    params = BenchmarkParams(url=url, prompts=str(prompts), max_new_tokens=4, warmup_requests=0)
    ctx = RecordingContext(work_dir=tmp_path)
    result = benchmark_stage.run(ctx, params)
    assert result["failed_requests"] == 0  # a warning, not a refusal: raw text is a valid request
    note = result["prompt_set"]["raw_text_note"]
    assert note.startswith("3 of 3 prompts are raw text, sent without the target's chat template")
    assert any(note in line for line in ctx.lines)
