"""real_model.py's `recipes` phase: train-stage variants (a recipe set) on the pipeline's own extraction,
validated on its held-out extraction, once the pipeline has ended (bench/gpu/recipes.py runs them).

    python3 bench/gpu/real_model.py recipes WORK OUT [--recipe-set data-size|speculators] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from journey_api import ROOT, TRAIN_SETTINGS, client, posted_pipeline, train_job

# Issue 15's data-size curve on the pipeline's own extraction: the first N training samples, the same
# schedule, validated on the same held-out MT-Bench answers (simulated acceptance, within 1.1 % of SGLang's on
# those prompts in run 8). Run 4 tried the learning rate and epochs (docs/training.md, "Learning rate,
# epochs and data"): lr 1e-3 for 10 epochs, the journey's defaults.
# `--recipe-set speculators`: the two defaults of speculators' trainer that eyas lacked (GPU run 13: on the
# same 4,000-conversation extraction its draft accepted more than eyas's from the second draft position on,
# in eyas eval of both). GPU run 14 measured the pair (SGLang d5 1.89 -> 2.22) and made it eyas's default;
# run 15's `--only norm_output --only frozen_head` found norm_output carries the gain (docs/training.md).
RECIPE_SETS = {
    "data-size": {
        "n1000": {"train_samples": 1000},
        "n2000": {"train_samples": 2000},  # with n1000, the points under a 4,000-conversation pipeline
        "n4000": {"train_samples": 4000},
        "n8000": {"train_samples": 8000},
    },
    "speculators": {  # both options spelt out: since GPU run 14 "both" is the train stage's default
        "old_defaults": {"norm_output": False, "train_lm_head": True},
        "norm_output": {"norm_output": True, "train_lm_head": True},
        "frozen_head": {"norm_output": False, "train_lm_head": False},
        "both": {"norm_output": True, "train_lm_head": False},
    },
    # SpecForge 0.2.0's recipe (EAGLE-3's) in eyas's trainer: its lm_head starts random and trains (GPU run
    # 16's draft: cosine 0.02 to the target's rows), and the next TTT step reads the pre-norm state (its own
    # `norm_output` only norms before its lm_head, which SGLang always does). Which one costs its draft
    # 1.86 against eyas's 2.21 at d5 on SGLang (docs/training.md, "GPU run 16")
    "specforge": {
        "specforge_recipe": {"init_lm_head": "random", "train_lm_head": True, "norm_output": False},
        "random_head": {"init_lm_head": "random", "train_lm_head": True, "norm_output": True},
    },
}


def recipes(args: argparse.Namespace) -> None:
    """Train-stage variants on the pipeline's extraction, validated on its held-out extraction, run in
    WORK/recipes, reported to OUT/recipes.json. Run it once the pipeline is done: the sweep's GPU gate
    refuses a GPU shared with these, and beside the train step they ran it out of memory (run 4)."""
    work = args.work.resolve()
    train = train_job(posted_pipeline(client(work), work))["params"]
    base = {key: train[key] for key in TRAIN_SETTINGS} | {"device": "cuda"}
    command = [sys.executable, str(ROOT / "bench" / "gpu" / "recipes.py"), train["data"], train["target"]]
    chosen = RECIPE_SETS[args.recipe_set]
    if args.only:  # a GPU session with time for fewer variants than the set holds
        unknown = sorted(set(args.only) - set(chosen))
        if unknown:
            raise SystemExit(f"--only {unknown}: not in recipe set {args.recipe_set!r} ({sorted(chosen)})")
        chosen = {name: chosen[name] for name in args.only}
    command += [str(work / "recipes"), "--parallel", str(len(chosen)), "--base", json.dumps(base)]
    command += ["--deadline-s", str(args.deadline_s)]
    if train.get("held_out_data"):
        command += ["--held-out", train["held_out_data"]]
    for name, overrides in chosen.items():
        command += ["--variant", f"{name}={json.dumps(overrides)}"]
    subprocess.run(command, check=True, cwd=ROOT)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recipes.json").write_bytes((work / "recipes" / "recipes.json").read_bytes())
