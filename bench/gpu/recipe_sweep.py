"""The recipe variant with the best held-out estimate, served: its draft through a chain sweep on real SGLang.

`real_model.py recipes` trains variants of the pipeline's train step on its extraction and scores each epoch
on the held-out extraction; this picks the finished variant whose chosen epoch scores highest at the sweep's
middle depth and, when it beats the pipeline's own drafter there, sweeps it as a benchmark job of the same
`eyas up` (OUT/recipe_sweep.json). The held-out estimate chose it; SGLang says what it serves.

    real_model.py recipe-sweep WORK OUT [--deadline-s S]      # after `recipes`, with the GPU idle
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from journey_api import SIDE_BY_SIDE_CONFIGS, client, posted_pipeline, run_sweep_job, train_job


def recipe_sweep(args: argparse.Namespace) -> None:
    """The recipe with the highest held-out estimate at the sweep's middle depth, if it beats the pipeline's
    own drafter there, through a chain sweep on real SGLang (OUT/recipe_sweep.json): the held-out estimate
    chose it, SGLang says what it serves."""
    work, out = args.work.resolve(), args.out
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    report = json.loads((work / "recipes" / "recipes.json").read_text())
    http = client(work)
    own = train_job(posted_pipeline(http, work))["result"]["best"]
    name, best = best_recipe(report["variants"])
    choice = {"recipe": name, "best": best, "pipeline_best": own}
    if best is None or best["accept_len"] <= own["accept_len"]:
        (out / "recipe_sweep.json").write_text(json.dumps({**choice, "swept": False}, indent=2))
        print(f"no recipe beats the pipeline's drafter on held-out: {json.dumps(choice)}", flush=True)
        return
    from speculators_side_by_side import sweep_job

    spec = sweep_job(work, Path(best["checkpoint"]), SIDE_BY_SIDE_CONFIGS)
    job = run_sweep_job(http, spec, began, args.deadline_s, work / "recipes" / f"sweep_job_id_{name}")
    (out / "recipe_sweep.json").write_text(json.dumps({**choice, "swept": True, "job": job}, indent=2))
    print(f"recipe {name} sweep {job['state']}: {json.dumps(job.get('result'))[:1500]}", flush=True)


def best_recipe(variants: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The finished variant whose chosen epoch has the highest estimate (its `best`, held-out when given)."""
    finished = {n: r["best"] for n, r in variants.items() if r.get("returncode") == 0 and r.get("best")}
    if not finished:
        return None, None
    name = max(finished, key=lambda n: finished[n]["accept_len"])
    return name, finished[name]
