"""`eyas demo DIR --target smollm2`: the real target (cached), training prompts, MT-Bench, a pipeline spec."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import EAGLE3_STEPS, eagle3_plan
from contract.stages import parse_params
from drafting.serving.prompts import load_prompts
from tests.realmodels.targets import realmodel, smollm2_target

pytestmark = realmodel
ROOT = Path(__file__).resolve().parents[2]


def _seed_cached_target(folder: Path) -> None:
    """DIR/target as a finished earlier build left it (the weights linked, not copied: 269 MB)."""
    folder.mkdir(parents=True)
    for path in smollm2_target().iterdir():
        if path.name == "model.safetensors":
            (folder / path.name).symlink_to(path)
        else:
            shutil.copy(path, folder / path.name)


def test_demo_writes_a_real_model_pipeline_from_prompts(tmp_path: Path) -> None:
    _seed_cached_target(tmp_path / "demo" / "target")
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "demo", str(tmp_path / "demo"), "--target", "smollm2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "(cached)" in done.stdout
    demo = tmp_path / "demo"
    spec = json.loads((demo / "pipeline.json").read_text())
    pipeline = Eagle3PipelineCreate(**spec)
    assert pipeline.data is None
    assert pipeline.generate is not None
    steps = eagle3_plan(pipeline, str(demo / "runs" / "x"))
    by_step = {s.step: s.params for s in steps}
    assert list(by_step) == [
        "generate", "generate_held_out", "extract", "extract_held_out", "train", "fix_keys", "gpu_check",
        "eval", "benchmark",
    ]  # fmt: skip
    evaluated, validated = demo / "mtbench_eval.jsonl", demo / "mtbench_held_out.jsonl"
    # training prompts are eyas's own; MT-Bench is cut in two: 8 questions evaluated on, the next 8 validated
    # on (the held-out set), both held out of the training generate
    assert by_step["generate"]["prompts"] == str(demo / "train_prompts.jsonl")
    assert set(by_step["generate"]["holdout_prompts"]) == {str(evaluated), str(validated)}
    assert by_step["generate"]["self_prompts"]["openers"] == "tasks"  # measured better on MT-Bench (H200)
    assert by_step["generate_held_out"]["prompts"] == str(validated)
    assert by_step["generate_held_out"]["holdout_prompts"] == [str(evaluated)]
    assert by_step["eval"]["prompts"] == by_step["benchmark"]["prompts"] == str(evaluated)
    assert by_step["train"]["held_out_data"] == by_step["extract_held_out"]["output"]
    asked = load_prompts(evaluated, limit=by_step["eval"]["max_prompts"])
    held = load_prompts(validated)
    assert len(asked) == len(held) == 8
    assert len({p.category for p in asked}) == len({p.category for p in held}) == 8  # one of each
    assert None not in {p.id for p in [*asked, *held]}
    assert not {p.id for p in asked} & {p.id for p in held}, "no question in both"
    for step in steps:
        parse_params(step.kind, step.params)  # every step's params are valid as the pipeline submits them
    assert by_step["train"]["init_lm_head"] == "target"  # from the tied embedding


def test_demo_gpu_writes_the_recipe_measured_on_the_h200(tmp_path: Path) -> None:
    """`--gpu`: GPU run 12's recipe (SGLang, 16,000 self-prompted conversations, lr 1e-3 x 10), MT-Bench cut
    into the 8 questions the sweep asks and the other 72 as the held-out set; every param valid."""
    from cli.demo.real import GPU_CONFIGS

    demo = tmp_path / "demo"
    _seed_cached_target(demo / "target")
    command = [sys.executable, "-m", "cli.main", "demo", str(demo), "--target", "smollm2", "--gpu"]
    done = subprocess.run([*command, "--host", "h200"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "GPU recipe" in done.stdout
    spec = json.loads((demo / "pipeline.json").read_text())
    pipeline = Eagle3PipelineCreate(**spec)
    assert pipeline.host == "h200"
    steps = eagle3_plan(pipeline, str(demo / "runs" / "x"))
    by_step = {s.step: s.params for s in steps}
    # every step but eval: the sweep measures what it would predict
    assert list(by_step) == [step for step in EAGLE3_STEPS if step != "eval"]
    for step in steps:
        parse_params(step.kind, step.params)
    generate, train = by_step["generate"], by_step["train"]
    assert generate["engine"]["engine"] == by_step["benchmark"]["launch"]["engine"] == "sglang"
    assert generate["self_prompts"]["count"] == 16000
    assert generate["self_prompts"]["openers"] == "tasks"
    assert (train["device"], train["lr"], train["epochs"], train["ttt_steps"]) == ("cuda", 1e-3, 10, 7)
    assert by_step["benchmark"]["configs"] == GPU_CONFIGS
    held_out = by_step["serve_held_out"]  # SGLang on the held-out questions too: train's estimate checked
    # the held-out questions as generate_held_out answered them (its output; the artifact fills it in)
    assert (held_out["prompts"], held_out["depths"], held_out["ignore_eos"]) == (
        by_step["generate_held_out"]["output"],
        [5],
        False,
    )
    assert by_step["benchmark"]["launch"].get("cuda_graphs", True) is not False  # as deployments run
    asked = load_prompts(demo / "mtbench_eval.jsonl")
    held = load_prompts(demo / "mtbench_held_out.jsonl")
    assert (len(asked), len(held)) == (8, 72)
    assert not {p.id for p in asked} & {p.id for p in held}, "no question in both"
    tiny = subprocess.run(
        [sys.executable, "-m", "cli.main", "demo", str(tmp_path / "t"), "--gpu"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert tiny.returncode == 2
    assert "--target smollm2" in tiny.stderr
