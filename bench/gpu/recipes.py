"""Training recipes side by side on one extraction, several at once on one GPU (prints JSON).

This runs the train stage once per variant, `--parallel` of them at a time, each in its own process, on the
same extraction, and reports every epoch's acceptance estimate: on the held-out extraction (`--held-out`,
prompts kept out of training; what to trust) and on the split. Parallel runs share the GPU and buy little:
on the H200 one SmolLM2-135M drafter run at batch 32 already keeps it busy (4 at once made 9.2 optimizer
steps/s against 8.2 alone) and each held 25-48 GB (docs/training.md, run 4). A variant is
a JSON object of train params that differ from the base (`lr`, `epochs`, `step_decay`, `train_samples`…).

    python3 bench/gpu/recipes.py EXTRACTION TARGET OUT [--held-out EXTRACTION] [--parallel 4] \
        [--base '{"epochs": 6, "batch_size": 32, "lr": 3e-4}'] [--variant NAME='{"lr": 1e-3}' ...]
    python3 bench/gpu/recipes.py one PARAMS_JSON RESULT_JSON     # one variant (what the parent runs)

Timings of variants that ran at the same time share the GPU: compare acceptance across variants, and time only
with `--parallel 1`. A variant stopped at `--deadline-s` (or killed with the machine) still reports the epochs
it finished: the train stage writes each to OUT/NAME/run.json as it ends.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DEPTHS = (3, 5, 7)
BASE = {"epochs": 6, "batch_size": 32, "max_len": 1024, "lr": 3e-4, "ttt_steps": 7, "device": "cuda"}


def run_one(params_file: Path, result_file: Path) -> None:
    """The train stage in this process with the params in `params_file`; its result and metrics to JSON."""
    from contract.params.train import TrainParams
    from drafting.stages import train
    from drafting.stages.base import RecordingSink, StageContext

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


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = {**BASE, **json.loads(args.base), "data": str(args.extraction), "target": str(args.target)}
    if args.held_out is not None:
        base["held_out_data"] = str(args.held_out)
    variants = dict(_variant(text) for text in args.variant) or {"base": {}}
    waiting = list(variants.items())
    running: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    results: dict[str, Any] = {}
    deadline = time.monotonic() + args.deadline_s if args.deadline_s else None
    while waiting or running:
        if deadline is not None and time.monotonic() > deadline:
            for name, _ in waiting:  # never started: reported as such, not silently left out
                results[name] = {"overrides": variants[name], "returncode": None, "started": False}
            waiting = []
            for _, process, _ in running:
                process.send_signal(signal.SIGTERM)  # no handler in `one`: the variant ends at once
            deadline = None
        while waiting and len(running) < args.parallel:
            name, overrides = waiting.pop(0)
            running.append(_start(out, name, {**base, **overrides, "output": str(out / name)}))
        time.sleep(2)
        for entry in [e for e in running if e[1].poll() is not None]:
            running.remove(entry)
            name, process, result_file = entry
            results[name] = _finished(variants[name], process.returncode, result_file, out / name)
            print(json.dumps({name: _last(results[name])}), flush=True)
    return {"base": base, "parallel": args.parallel, "deadline_s": args.deadline_s, "variants": results}


def _finished(overrides: dict[str, Any], returncode: int, result_file: Path, output: Path) -> dict[str, Any]:
    """A variant's report: its result, or (stopped or failed) the epochs its run folder's run.json holds."""
    from drafting.stages._train_record import read_run

    result: dict[str, Any] = {"overrides": overrides, "returncode": returncode}
    if result_file.exists():
        return result | json.loads(result_file.read_text())
    try:
        epochs = (read_run(output) or {}).get("epochs", [])
    except ValueError:  # killed while writing it
        epochs = []
    return result | {"partial": True, "epochs": [_epoch_row(summary) for summary in epochs]}


def _start(out: Path, name: str, params: dict[str, Any]) -> tuple[str, subprocess.Popen[bytes], Path]:
    params_file, result_file = out / f"{name}.params.json", out / f"{name}.result.json"
    params_file.write_text(json.dumps(params))
    log = open(out / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
    command = [sys.executable, str(Path(__file__).resolve()), "one", str(params_file), str(result_file)]
    return name, subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), result_file


def _variant(text: str) -> tuple[str, dict[str, Any]]:
    name, _, overrides = text.partition("=")
    if not name.isidentifier() or not overrides:
        raise SystemExit(f"--variant NAME='{{json}}', got {text!r}")
    return name, json.loads(overrides)


def _last(result: dict[str, Any]) -> dict[str, Any]:
    epochs = result.get("epochs") or [{}]
    return {"returncode": result["returncode"], "wall_s": result.get("wall_s"), "last_epoch": epochs[-1]}


def main() -> None:
    if sys.argv[1:2] == ["one"]:
        run_one(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("extraction", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--held-out", type=Path)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument(
        "--deadline-s", type=float, default=0, help="stop variants still running after this long (0: none)"
    )
    parser.add_argument("--base", default="{}", help="train params for every variant (JSON)")
    parser.add_argument("--variant", action="append", default=[], help="NAME='{json overrides}'")
    args = parser.parse_args()
    report = run_all(args)
    (args.out / "recipes.json").write_text(json.dumps(report, indent=1))
    print(f"report: {args.out / 'recipes.json'}", flush=True)


if __name__ == "__main__":
    main()
