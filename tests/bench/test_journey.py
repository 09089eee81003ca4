"""bench.journey's pipeline before any GPU time: the spec its flags make is the GPU recipe, checked as the
API validates and plans it (conversations given instead of generate, held-out answers given, a recipe set
with --set, no eval, its own sweep configs), bad flags refused with what is wrong; and `sweep`, which serves
another draft through the pipeline's own sweep as a benchmark job the real API takes. The GPU run itself:
docs/gpu-journey.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan
from bench import journey
from cli.demo.real import ANSWER_TOKENS, GPU_CONFIGS, QWEN_GPU_SWEEP
from contract.params.generate import GenerateParams
from contract.params.train import TrainParams
from tests.app.test_jobs_api import register_host

CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def mtbench(path: Path, per_category: int = 10) -> Path:
    rows = [
        {"question_id": n * 10 + i, "category": c, "turns": [f"{c} question {n}"]}
        for n in range(per_category)
        for i, c in enumerate(CATEGORIES)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def conversations(path: Path, count: int) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
            for i in range(count)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def spec_of(work: Path, *flags: str) -> dict[str, Any]:
    """The spec `run` would post for `flags` (the target given, so nothing is built)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "target").mkdir(exist_ok=True)
    args = journey.parse(["run", str(work), str(work / "out"), "--prompts", str(mtbench(work / "q.jsonl")),
                          "--target", str(work / "target"), *flags])  # fmt: skip
    return journey.prepare(args)[1]


def plan(spec: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {s.step: s for s in eagle3_plan(Eagle3PipelineCreate(**spec), str(tmp_path / "runs/p"))}


def test_the_default_journey_is_the_gpu_recipe_with_held_out_questions_split_off(tmp_path: Path) -> None:
    spec = spec_of(tmp_path / "w", "--held-out", "16")
    steps = plan(spec, tmp_path)
    assert list(steps) == ["generate", "generate_held_out", "extract", "extract_held_out", "train",
                           "fix_keys", "gpu_check", "serve_held_out", "benchmark"]  # fmt: skip
    assert spec["host"] == "gpu"
    evaluated = (tmp_path / "w" / "mtbench_eval.jsonl").read_text().splitlines()
    held = (tmp_path / "w" / "mtbench_held_out.jsonl").read_text().splitlines()
    assert (len(evaluated), len(held)) == (8, 16)  # one eval question a category, the next two held out
    assert not set(evaluated) & set(held)
    assert spec["benchmark"]["prompts"] == str(tmp_path / "w" / "mtbench_eval.jsonl")
    assert spec["benchmark"]["configs"] == GPU_CONFIGS
    assert spec["eval"] is None  # null skips the step; left out, the pipeline would run eval's defaults
    created = Eagle3PipelineCreate(**spec)  # what POST /v1/pipelines validates
    assert (
        GenerateParams.model_validate(
            {**(created.generate or {}), "target": "/t", "output": "/o.jsonl"}
        ).self_prompts.openers
        == "tasks"
    )  # type: ignore[union-attr]
    with pytest.raises(SystemExit, match="--held-out 100"):  # more than the 80 questions
        spec_of(tmp_path / "x", "--held-out", "100")


def test_the_journey_can_add_eval_and_take_its_own_sweep(tmp_path: Path) -> None:
    flags = ["--held-out", "0", "--eval", "--configs", "3,1,4 5,1,6", "--repeats", "2", "--lr", "3e-4"]
    flags += ["--openers", "none", "--sglang-args=--attention-backend triton --grammar-backend none"]
    spec = spec_of(tmp_path / "w", *flags)
    assert spec["eval"]["prompts"] == spec["benchmark"]["prompts"] == str(tmp_path / "w" / "mtbench.jsonl")
    assert "held_out" not in spec
    assert spec["train"]["lr"] == 3e-4
    assert spec["benchmark"]["configs"] == [
        {"steps": 3, "topk": 1, "draft_tokens": 4},
        {"steps": 5, "topk": 1, "draft_tokens": 6},
    ]
    assert spec["benchmark"]["repeats"] == 2
    assert "openers" not in spec["generate"]["self_prompts"]
    extra = ["--attention-backend", "triton", "--grammar-backend", "none"]
    assert spec["benchmark"]["launch"]["extra_args"] == spec["generate"]["engine"]["extra_args"] == extra
    assert "eval" in plan(spec, tmp_path)
    with pytest.raises(SystemExit, match="steps,topk,draft_tokens"):  # a config is three numbers
        spec_of(tmp_path / "x", "--held-out", "0", "--configs", "3,1")


def test_the_qwen_journey_runs_its_demos_sweep_on_its_own_question_split(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path / "w", "--real-target", "qwen2.5-coder-1.5b", "--held-out", "48", "--repeats", "1"
    )
    evaluated = (tmp_path / "w" / "mtbench_eval.jsonl").read_text().splitlines()
    held = (tmp_path / "w" / "mtbench_held_out.jsonl").read_text().splitlines()
    assert (len(evaluated), len(held)) == (32, 48)  # four a category swept, the other 48 held out
    assert not set(evaluated) & set(held)
    sweep = spec["benchmark"]
    assert sweep["configs"] == QWEN_GPU_SWEEP["configs"]
    assert sweep["concurrencies"] == [1, 8, 32]
    assert (sweep["max_prompts"], sweep["repeats"]) == (32, 1)  # --repeats overrides the demo's 2
    assert "benchmark" in plan(spec, tmp_path)  # as POST /v1/pipelines plans it
    smol = spec_of(tmp_path / "s", "--held-out", "16", "--sweep-prompts", "16")
    assert smol["benchmark"]["max_prompts"] == 16
    assert smol["benchmark"]["repeats"] == 3


def test_given_conversations_replace_generate_and_answered_held_out_ones_are_served(tmp_path: Path) -> None:
    training = conversations(tmp_path / "c.jsonl", 5)
    held_out = conversations(tmp_path / "h.jsonl", 3)
    flags = ["--held-out", "16", "--conversations", "4", "--data", str(training)]
    spec = spec_of(tmp_path / "w", *flags, "--held-out-conversations", str(held_out))
    assert "generate" not in spec
    assert spec["extract"]["limit"] == 4  # the file holds 5: extract takes the first 4 asked for
    steps = plan(spec, tmp_path)
    assert list(steps) == ["extract", "extract_held_out", "train", "fix_keys", "gpu_check", "serve_held_out",
                           "benchmark"]  # fmt: skip
    assert (steps["extract"].params["data"], steps["extract_held_out"].params["data"]) == (
        str(training),
        str(held_out),
    )
    served = steps["serve_held_out"].params
    assert (served["prompts"], served["max_new_tokens"], served["ignore_eos"]) == (
        str(held_out),
        ANSWER_TOKENS,
        False,
    )
    assert steps["train"].params["held_out_data"] == steps["extract_held_out"].params["output"]
    with pytest.raises(SystemExit, match="needs --held-out-conversations"):
        spec_of(tmp_path / "x", "--held-out", "16", "--data", str(training))


def test_a_recipe_without_serve_held_out_plans_as_the_api_validates_it(tmp_path: Path) -> None:
    """`--no-serve-held-out --set train.norm_output=false --set train.train_lm_head=true` (the previous
    recipe): train still validates on the held-out answers, nothing serves them, and the recipe reaches
    train's params; a section the pipeline lacks, or a param its stage lacks, is refused before any GPU
    time."""
    recipe = ["--set", "train.norm_output=false", "--set", "train.train_lm_head=true"]
    spec = spec_of(tmp_path / "w", "--held-out", "16", "--no-serve-held-out", *recipe)
    steps = plan(spec, tmp_path)
    assert "serve_held_out" not in steps
    train = steps["train"].params
    parsed = TrainParams.model_validate(train)  # what the worker runs
    assert (parsed.norm_output, parsed.train_lm_head) == (False, True)
    assert train["held_out_data"] == steps["extract_held_out"].params["output"]
    assert train["lr"] == 1e-3  # the rest of the section is kept
    pinned = spec_of(tmp_path / "v", "--set", 'fix_keys.sglang_version="0.5.23"')  # a step left at defaults
    assert plan(pinned, tmp_path)["fix_keys"].params["sglang_version"] == "0.5.23"
    with pytest.raises(SystemExit, match="no 'eval' section"):  # null: the step is off (--eval adds it)
        spec_of(tmp_path / "e", "--set", "eval.depths=[3]")
    with pytest.raises(SystemExit, match="no 'trian' section"):
        spec_of(tmp_path / "x", "--set", "trian.norm_output=true")
    with pytest.raises(SystemExit, match="train.norm_ouput: train has no such param"):
        spec_of(tmp_path / "y", "--set", "train.norm_ouput=true")


@pytest.mark.parametrize("held_out", [False, True])
def test_sweep_serves_another_draft_as_the_pipelines_own_step_served_its_drafter(
    client: TestClient, admin: dict[str, str], settings: Settings, held_out: bool
) -> None:
    """The pipeline posted to the real API (no worker runs here: its jobs stay pending), read back as
    `sweep` reads it; the benchmark job built from its sweep (or serve_held_out) step is taken by the API
    with every param of that step but the draft."""
    root = Path(settings.allowed_roots[0])
    work = root / f"journey-{held_out}"
    register_host(settings, "gpu", gpus=1, roots=[str(root)])
    client.headers.update(admin)
    spec = spec_of(work, "--held-out", "16")
    created = client.post("/v1/pipelines", json=spec)
    assert created.status_code == 201, created.text
    pipeline = client.get(f"/v1/pipelines/{created.json()['id']}").json()
    draft = work / "spec" / "sglang_draft"
    body = journey.draft_sweep(pipeline, draft, held_out=held_out)
    step = next(
        j for j in pipeline["jobs"] if j["pipeline_step"] == ("serve_held_out" if held_out else "benchmark")
    )
    posted = client.post("/v1/jobs", json=body)
    assert posted.status_code == 201, posted.text
    params = posted.json()["params"]
    assert params["launch"]["draft"] == str(draft)
    assert step["params"]["launch"]["draft"] != str(draft)  # the pipeline's own step is left as it was
    assert {k: v for k, v in params.items() if k != "launch"} == {
        k: v for k, v in step["params"].items() if k != "launch"
    }
    assert {k: v for k, v in params["launch"].items() if k != "draft"} == {
        k: v for k, v in step["params"]["launch"].items() if k != "draft"
    }
    without = client.post("/v1/pipelines", json=spec_of(work / "b", "--held-out", "0")).json()
    if held_out:
        with pytest.raises(SystemExit, match="has no serve_held_out step"):
            journey.draft_sweep(client.get(f"/v1/pipelines/{without['id']}").json(), draft, held_out=True)
