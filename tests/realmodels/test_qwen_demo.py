"""`eyas demo DIR --target qwen2.5-coder-1.5b --gpu`'s pipeline, planned as the API plans it: a 32,000-token
draft vocabulary, chains 3/5/7 and a tree at concurrency 1, 8 and 32 over 32 MT-Bench questions, the other
48 held out. Built from the demo's own functions on MT-Bench (the 3.5 GB target itself is not needed to
plan: its folder is only named)."""

from __future__ import annotations

from pathlib import Path

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan
from cli.demo.real import QWEN_GPU_SWEEP, demo_pipeline_spec, demo_prompt_counts
from contract.stages import parse_params
from drafting.prompting.named import resolve_source
from drafting.prompting.split import split_prompt_file
from drafting.serving.prompts import load_prompts

TARGET = "qwen2.5-coder-1.5b"


def test_the_qwen_gpu_recipe_sweeps_32_questions_at_three_concurrencies(tmp_path: Path) -> None:
    asked, held_out = demo_prompt_counts(TARGET, gpu=True)
    assert (asked, held_out) == (32, 48)
    evaluated, validated = split_prompt_file(
        resolve_source("mtbench"), asked, held_out, tmp_path / "eval.jsonl", tmp_path / "held_out.jsonl"
    )
    (tmp_path / "target").mkdir()
    assets = {
        "target": str(tmp_path / "target"),
        "train_prompts": str(resolve_source("default")),
        "prompts": str(evaluated),
        "held_out_prompts": str(validated),
    }
    spec = demo_pipeline_spec(TARGET, assets, workdir=str(tmp_path / "runs"), gpu=True)
    steps = {s.step: s for s in eagle3_plan(Eagle3PipelineCreate(**spec), str(tmp_path / "runs" / "x"))}
    for step in steps.values():
        parse_params(step.kind, step.params)  # as the pipeline submits them
    assert steps["train"].params["draft_vocab_size"] == 32000
    benchmark = steps["benchmark"].params
    assert benchmark["configs"] == QWEN_GPU_SWEEP["configs"]
    assert (benchmark["concurrencies"], benchmark["max_prompts"]) == ([1, 8, 32], 32)
    assert benchmark["prompts"] == str(evaluated)
    asked_prompts, held = load_prompts(evaluated), load_prompts(validated)
    assert (len(asked_prompts), len(held)) == (32, 48)
    assert not {p.id for p in asked_prompts} & {p.id for p in held}, "no question both swept and held out"
    assert str(evaluated) in steps["generate_held_out"].params["holdout_prompts"]
    assert demo_prompt_counts("smollm2", gpu=True) == (8, 72), "SmolLM2's recipe is unchanged"
    cpu = demo_pipeline_spec(TARGET, assets, workdir=str(tmp_path / "cpu"), gpu=False)
    assert cpu["train"]["draft_vocab_size"] == 32000
    assert (
        demo_pipeline_spec("smollm2", assets, workdir=str(tmp_path / "s"), gpu=False)["train"][
            "draft_vocab_size"
        ]
        == 8192
    )
