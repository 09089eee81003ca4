"""`eyas demo DIR --target smollm2`: the real target (cached), training prompts, MT-Bench, a pipeline spec."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan
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
    assert [s.step for s in steps] == [
        "generate", "extract", "train", "fix_keys", "gpu_check", "eval", "benchmark"
    ]  # fmt: skip
    generate = steps[0].params
    # training prompts are eyas's own; MT-Bench is only evaluated on, and held out of generate
    assert generate["prompts"] == str(demo / "train_prompts.jsonl")
    assert generate["holdout_prompts"] == [str(demo / "mtbench.jsonl")]
    assert steps[5].params["prompts"] == steps[6].params["prompts"] == str(demo / "mtbench.jsonl")
    assert len(load_prompts(demo / "mtbench.jsonl")) == 80
    for step in steps:
        parse_params(step.kind, step.params)  # every step's params are valid as the pipeline submits them
    assert steps[2].params["init_lm_head"] == "target"  # from the tied embedding
