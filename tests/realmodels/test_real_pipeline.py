"""A small real-model pipeline end to end on the CPU: the demo's spec, scaled down, on SmolLM2.

generate (two prompts answered by the target on the reference engine) → generate_held_out (two held-out
questions) → extract → extract_held_out → train (a few steps, validated on the held-out set) → fix_keys →
eval on MT-Bench, each step's params as the eagle3 template plans them and each stage run as the
worker runs it (in this process). Acceptance here is whatever a few steps buy; what is asserted is that every
step consumes the last one's output and that the outputs are checked token for token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan
from cli.demo.real import real_pipeline_spec
from contract.stages import parse_params
from drafting.context import StageContext
from drafting.serving.prompts import prepare_prompts
from drafting.stages import load_stage
from tests.realmodels.targets import realmodel, smollm2_target

pytestmark = realmodel
SKIPPED = ("gpu_check", "benchmark")  # a GPU check on a CPU host, and a sweep (minutes): elsewhere


def _small_spec(root: Path) -> dict[str, Any]:
    mtbench = root / "mtbench.jsonl"
    assets = {
        "target": str(smollm2_target()),
        "train_prompts": str(root / "train.jsonl"),
        "prompts": str(mtbench),
    }
    (root / "train.jsonl").write_text(
        json.dumps({"text": "Name three colours."}) + "\n" + json.dumps({"text": "What is 2 + 2?"}) + "\n"
    )
    mtbench.write_text(json.dumps({"question_id": 1, "category": "math", "turns": ["What is 3 + 4?", "x"]}))
    held_out = root / "held_out.jsonl"
    held_out.write_text(
        json.dumps({"question_id": 2, "category": "math", "turns": ["What is 5 + 1?"]}) + "\n"
        + json.dumps({"question_id": 3, "category": "writing", "turns": ["Name a bird."]}) + "\n"
    )  # fmt: skip
    assets["held_out_prompts"] = str(held_out)
    spec = real_pipeline_spec(assets, workdir=str(root / "runs"))
    spec["generate"] = {**spec["generate"], "max_new_tokens": 16}
    del spec["generate"]["self_prompts"]
    spec["train"] = {**spec["train"], "epochs": 1, "batch_size": 1, "draft_vocab_size": 512}
    spec["eval"] = {**spec["eval"], "depths": [2], "max_new_tokens": 8}
    return spec


def test_prompts_to_an_evaluated_drafter_on_the_real_target(tmp_path: Path) -> None:
    spec = Eagle3PipelineCreate(**_small_spec(tmp_path))
    results: dict[str, Any] = {}
    for step in eagle3_plan(spec, str(tmp_path / "runs" / "p")):
        if step.kind in SKIPPED:
            continue
        params = dict(step.params)
        if step.kind == "fix_keys":  # the train step's drafter artifact, as the pipeline fills the ref
            params["source"] = results["train"]["checkpoint"]
        ctx = StageContext(work_dir=tmp_path)
        results[step.step] = load_stage(step.kind)(ctx, parse_params(step.kind, params))
    generated = [json.loads(line) for line in Path(results["generate"]["output"]).read_text().splitlines()]
    assert len(generated) == 2
    assert all(r["messages"][-1]["role"] == "assistant" and r["messages"][-1]["content"] for r in generated)
    assert results["extract"]["samples"] == 2
    assert results["extract_held_out"]["samples"] == 2  # the held-out questions, answered by the target
    assert results["train"]["checkpoint"] is not None
    # the held-out set validated the drafter and chose its checkpoint
    assert results["train"]["samples"]["held_out"] == 2
    assert results["train"]["best"]["source"] == "held_out"
    assert all("held_out/est_accept_len" in epoch for epoch in results["train"]["epochs"])
    # serve_held_out asks these answered records' prompts: the user turn, rendered, without the answer
    answered = Path(results["generate_held_out"]["output"])
    records = {r["id"]: r for r in map(json.loads, answered.read_text().splitlines())}
    served = prepare_prompts(answered, tokenizer_folder=spec.target)
    assert sorted(p.category or "" for p in served) == ["math", "writing"]
    for prompt in served:
        assert prompt.id is not None
        assert prompt.messages is not None
        assert prompt.input_ids
        assert list(prompt.messages) == records[prompt.id]["messages"][:-1]
        assert records[prompt.id]["messages"][-1]["role"] == "assistant"
    row = results["eval"]["depths"][0]
    assert results["eval"]["prompt_set"]["chat_prompts"] == 1
    assert row["outputs_match"] is True
    assert row["divergence"]["identical"] == 1
    assert row["by_category"]["math"]["prompts"] == 1
    assert row["accept_length"] >= 1.0
