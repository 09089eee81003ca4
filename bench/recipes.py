"""Training recipes side by side on one extraction: the train stage once per variant, `--parallel` of them
at a time, each in its own process, and every epoch's acceptance estimate reported, on the held-out
extraction (`--held-out`: prompts kept out of training, what to trust) and on the training split. Prints a
line per finished variant and writes OUT/recipes.json.

A variant is a JSON object of train params that differ from the base (`lr`, `epochs`, `train_samples`, …);
`--recipe-set` names a set of them (RECIPE_SETS). The base is the train stage's defaults with BASE's
schedule, or `--base`: JSON, or @FILE holding it, such as the train_params.json `bench.journey run` writes
(its data, target, output and held-out paths are replaced by this command's). Variants that run at the same
time share the GPU: compare acceptance across them, and time only with `--parallel 1`. One SmolLM2-135M
drafter at batch 32 already keeps an H200 busy, so parallel variants buy little there.

    python -m bench.recipes EXTRACTION TARGET OUT [--held-out EXTRACTION] [--parallel 4]
        [--base '{"epochs": 6, "batch_size": 32, "lr": 3e-4}' | --base @OUT/train_params.json]
        [--recipe-set data-size|speculators|specforge [--only NAME ...]] [--variant NAME='{"lr": 1e-3}' ...]
    python -m bench.recipes one PARAMS_JSON RESULT_JSON     # one variant (what the parent runs)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import _cli as cli
from bench._run import ROOT, python_module
from drafting import proc

DEPTHS = (3, 5, 7)
BASE = {"epochs": 6, "batch_size": 32, "max_len": 1024, "lr": 3e-4, "ttt_steps": 7, "device": "cuda"}
PATHS = ("data", "target", "output", "held_out_data")  # this command's, never the base's

RECIPE_SETS: dict[str, dict[str, dict[str, Any]]] = {
    # The first N training samples of one extraction on the same schedule, validated on the same held-out
    # set: how acceptance grows with data (docs/benchmarks.md, "Data size at the default recipe").
    "data-size": {
        "n1000": {"train_samples": 1000},
        "n2000": {"train_samples": 2000},
        "n4000": {"train_samples": 4000},
        "n8000": {"train_samples": 8000},
    },
    # The two defaults speculators' trainer has, alone and together, both spelt out ("both" is the train
    # stage's default): norm_output carries the gain (docs/design/default-training-recipe.md).
    "speculators": {
        "old_defaults": {"norm_output": False, "train_lm_head": True},
        "norm_output": {"norm_output": True, "train_lm_head": True},
        "frozen_head": {"norm_output": False, "train_lm_head": False},
        "both": {"norm_output": True, "train_lm_head": False},
    },
    # SpecForge 0.2.0's recipe (EAGLE-3's) in eyas's trainer: its lm_head starts random and trains, and the
    # next TTT step reads the pre-norm state; and the random head alone, to tell which of the two costs it.
    "specforge": {
        "specforge_recipe": {"init_lm_head": "random", "train_lm_head": True, "norm_output": False},
        "random_head": {"init_lm_head": "random", "train_lm_head": True, "norm_output": True},
    },
}


def run_one(params_file: Path, result_file: Path) -> None:
    """The train stage in this process with the params in `params_file`; its result and metrics to JSON."""
    from contract.params.train import TrainParams
    from drafting.context import RecordingSink, StageContext
    from drafting.stages import train

    params = TrainParams.model_validate_json(params_file.read_text())
    sink = RecordingSink()
    began = time.monotonic()
    result = train.run(StageContext(work_dir=Path(params.output), sink=sink), params)
    rates = [e["value"] for e in sink.of_type("metric") if e["name"] == "train/tokens_per_s"]
    record = {
        "wall_s": round(time.monotonic() - began, 1),
        "tokens_per_s_median": sorted(rates)[len(rates) // 2] if rates else None,
        "best": result.get("best"),
        "epochs": [_epoch_row(summary) for summary in result.get("epochs", [])],
    }
    result_file.write_text(json.dumps(record, indent=1))


def _epoch_row(summary: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"epoch": int(summary["epoch"])}
    for source in ("held_out", "val"):
        row[source] = {  # the simulated decode (what the run chose by) and the per-position estimate
            f"{kind}_d{d}": round(summary[key], 4)
            for kind in ("sim", "est")
            for d in DEPTHS
            if (key := f"{source}/{kind}_accept_len_d{d}") in summary
        }
        if f"{source}/acc_0" in summary:
            row[source]["acc_0"] = round(summary[f"{source}/acc_0"], 4)
    return row


def base_params(args: argparse.Namespace) -> dict[str, Any]:
    text = args.base
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    given = {k: v for k, v in json.loads(text).items() if k not in PATHS}
    base = {**BASE, **given, "data": str(args.extraction.resolve()), "target": str(args.target.resolve())}
    if args.held_out is not None:
        base["held_out_data"] = str(args.held_out.resolve())
    return base


def chosen_variants(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """--variant entries, then the named set's (only the --only ones); `base` alone when none is given."""
    variants = dict(_variant(text) for text in args.variant)
    if args.recipe_set is not None:
        named = RECIPE_SETS[args.recipe_set]
        unknown = sorted(set(args.only or ()) - set(named))
        if unknown:
            raise SystemExit(f"--only {unknown}: not in recipe set {args.recipe_set!r} ({sorted(named)})")
        variants |= {name: named[name] for name in args.only or named}
    elif args.only:
        raise SystemExit("--only picks from a --recipe-set")
    return variants or {"base": {}}


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = base_params(args)
    variants = chosen_variants(args)
    waiting = list(variants.items())
    running: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    results: dict[str, Any] = {}
    try:
        while waiting or running:
            while waiting and len(running) < args.parallel:
                name, overrides = waiting.pop(0)
                running.append(_start(out, name, {**base, **overrides, "output": str(out / name)}))
            time.sleep(1)
            for entry in [e for e in running if e[1].poll() is not None]:
                running.remove(entry)
                name, process, result_file = entry
                results[name] = _finished(
                    variants[name], process.returncode, result_file, out / f"{name}.log"
                )
                print(json.dumps({name: _last(results[name])}), flush=True)
    finally:
        for _, process, _ in running:  # interrupted: no variant outlives the command
            proc.terminate_group(process.pid, grace_s=10, popen=process)
    return {"base": base, "parallel": args.parallel, "variants": results}


def _finished(overrides: dict[str, Any], returncode: int, result_file: Path, log: Path) -> dict[str, Any]:
    """A variant's report: its result, or where it failed, its log's path (its run folder's run.json holds
    the epochs it finished)."""
    result: dict[str, Any] = {"overrides": overrides, "returncode": returncode}
    if returncode == 0 and result_file.exists():
        return result | json.loads(result_file.read_text())
    return result | {"log": str(log)}


def _start(out: Path, name: str, params: dict[str, Any]) -> tuple[str, subprocess.Popen[bytes], Path]:
    params_file, result_file = out / f"{name}.params.json", out / f"{name}.result.json"
    params_file.write_text(json.dumps(params))
    argv = python_module("bench.recipes", "one", str(params_file), str(result_file))
    return name, proc.spawn(argv, cwd=ROOT, output=out / f"{name}.log"), result_file


def _variant(text: str) -> tuple[str, dict[str, Any]]:
    name, _, overrides = text.partition("=")
    if not name.isidentifier() or not overrides:
        raise SystemExit(f"--variant NAME='{{json}}', got {text!r}")
    return name, json.loads(overrides)


def _last(result: dict[str, Any]) -> dict[str, Any]:
    epochs = result.get("epochs") or [{}]
    return {"returncode": result["returncode"], "wall_s": result.get("wall_s"), "last_epoch": epochs[-1]}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = cli.parser(__doc__)
    parser.add_argument("extraction", type=Path, help="an eyas extract output folder")
    parser.add_argument("target", type=Path, help="the target model's folder")
    parser.add_argument("out", type=Path, help="a folder per variant, its log and OUT/recipes.json")
    parser.add_argument("--held-out", type=Path, help="the held-out extraction each epoch is scored on")
    parser.add_argument("--parallel", type=int, default=4, help="variants at a time")
    parser.add_argument("--base", default="{}", help="train params for every variant: JSON, or @FILE")
    parser.add_argument("--recipe-set", choices=sorted(RECIPE_SETS), help="a named set of variants")
    parser.add_argument("--only", action="append", help="only this variant of the set (repeatable)")
    parser.add_argument("--variant", action="append", default=[], help="NAME='{json overrides}'")
    return parser.parse_args(argv)


def main() -> None:
    if sys.argv[1:2] == ["one"]:
        run_one(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    args = parse(sys.argv[1:])
    report = run_all(args)
    (args.out / "recipes.json").write_text(json.dumps(report, indent=1))
    print(f"report: {args.out / 'recipes.json'}", flush=True)


if __name__ == "__main__":
    main()
