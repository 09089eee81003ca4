"""`eyas demo DIR --target smollm2`: a real target, training prompts, MT-Bench and a pipeline spec for them.

The pipeline starts from prompts: `generate` has the target answer the training prompts itself (and write
more user turns of its own, Magpie-style), then extract → train → fix_keys → gpu_check → eval → benchmark.
Training prompts are eyas's built-in plain-text set plus the target's own; MT-Bench is never trained on: it is
cut in two files that share no question (drafting.prompting.split), eight questions (one per category) that
eval and the sweep ask, and the next eight, answered by the target too, as the pipeline's `held_out` set,
which picks the best epoch and gives training's acceptance estimate (a split of the generated data overstates
it).
The pipeline refuses a set used for two of these roles, and generate drops training prompts equal to held-out
ones.

Sized for a 2-core CPU host with the reference engine (docs/real-models.md has the measured time): a few
dozen short conversations, one small drafter, eight MT-Bench questions. The acceptance it reaches is that of
a drafter trained on a few dozen conversations — a real measurement on a real model, not a useful drafter;
the same spec with `engine: sglang` and more prompts is the GPU recipe.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from drafting.prompting.named import resolve_source
from drafting.prompting.split import split_prompt_file
from drafting.realmodels import build_target

EVAL_PROMPTS = 8  # one MT-Bench question per category
HELD_OUT_PROMPTS = 8  # the next one per category: what validates the drafter, never what evaluates it
CPU_TRAIN: dict[str, Any] = {
    "device": "cpu",
    "dtype": "float32",
    "epochs": 3,
    "batch_size": 4,
    "max_len": 256,
    "draft_vocab_size": 8192,
    "lr": 3e-3,
    "warmup_steps": 0,
    "init_lm_head": "target",
    "ttt_steps": 3,
    "loader_workers": 0,
}


def write_real_demo(folder: Path, *, target: str = "smollm2", gguf: Path | None = None) -> dict[str, str]:
    """The built target (cached), training prompts and MT-Bench under `folder`; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    built = build_target(target, folder / "target", gguf=gguf)
    train_prompts = folder / "train_prompts.jsonl"
    shutil.copyfile(resolve_source("default"), train_prompts)
    evaluated, validated = split_prompt_file(
        resolve_source("mtbench"),
        EVAL_PROMPTS,
        HELD_OUT_PROMPTS,
        folder / "mtbench_eval.jsonl",
        folder / "mtbench_held_out.jsonl",
    )
    return {
        "target": str(built.folder),
        "train_prompts": str(train_prompts),
        "prompts": str(evaluated),
        "held_out_prompts": str(validated),
        "built": "yes" if built.built else "cached",
    }


def real_pipeline_spec(
    assets: dict[str, str], *, workdir: str, self_prompts: int = 16, eval_prompts: int = EVAL_PROMPTS
) -> dict[str, Any]:
    """An eagle3 pipeline from prompts over a real target, on the CPU (the reference engine); with
    `held_out_prompts` among the assets, a held-out validation set made from them."""
    engine = {"engine": "reference"}
    generate = {
        "prompts": assets["train_prompts"],
        # task openers: on the H200 they raised held-out MT-Bench first-token accuracy 0.509 -> 0.594 against
        # the target's prefix alone (docs/generate.md, Openers)
        "self_prompts": {
            "count": self_prompts,
            "max_new_tokens": 48,
            "min_chars": 12,
            "max_chars": 400,
            "openers": "tasks",
        },
        "max_new_tokens": 128,
        "temperature": 0.0,  # the drafter is evaluated on greedy decoding: learn the target's greedy answers
        "concurrency": 2,
        "engine": engine,
    }
    spec: dict[str, Any] = {
        "template": "eagle3",
        "target": assets["target"],
        "generate": generate,
        "workdir": workdir,
        "extract": {"device": "cpu", "dtype": "float32", "max_len": 256, "batch_size": 4},
        "train": dict(CPU_TRAIN),
        "eval": {
            "device": "cpu",
            "depths": [3, 5],
            "prompts": assets["prompts"],
            "max_prompts": eval_prompts,
            "max_new_tokens": 48,
        },
        "benchmark": {
            "depths": [3],
            "prompts": assets["prompts"],
            "max_prompts": 4,
            "max_new_tokens": 32,
            "repeats": 2,
            "warmup_requests": 0,
            # the CPU reference engine re-drafts without a KV cache: slower than plain decoding whatever the
            # acceptance, so no speedup is asked for here (keep 1.0 with SGLang on a GPU)
            "speedup_threshold": 0.0,
            "launch": dict(engine),
        },
    }
    if "held_out_prompts" in assets:
        spec["held_out"] = {"prompts": assets["held_out_prompts"]}
    return spec
