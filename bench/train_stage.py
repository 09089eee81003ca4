"""The train stage itself on a GPU (prints JSON): what a user's job gets, eager and with torch.compile (the
stage's default on cuda), from the stage's own train/tokens_per_s metric.

A random 1.3B Llama target (hidden 2048, 16 layers, vocab 32,000; testsupport/random_llama.py), 96
conversations of ~2,000 tokens extracted by the extract stage, then `--steps` optimizer steps of batch 2 per
variant.

    python -m bench.train_stage [--dir /tmp/stage] [--steps 40]
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from bench import _cli as cli
from contract.params.extract import ExtractParams
from contract.params.train import TrainParams
from drafting.context import RecordingSink, StageContext
from drafting.stages import extract, train
from testsupport.random_llama import LLAMA_1_5B_VOCAB_32K, long_conversations, save_random_llama


def run_train(root: Path, target: Path, steps: int, compiled: bool) -> dict[str, Any]:
    sink = RecordingSink()
    params = TrainParams(
        data=str(root / "hs"), target=str(target), output=str(root / f"run_{compiled}"), max_len=2048,
        batch_size=2, max_steps=steps, val_fraction=0, draft_vocab_size=32000, compile=compiled,
    )  # fmt: skip
    started = time.perf_counter()
    train.run(StageContext(work_dir=root, sink=sink), params)
    rates = [e["value"] for e in sink.of_type("metric") if e["name"] == "train/tokens_per_s"]
    steady = rates[len(rates) // 4 :]  # past compilation and warm-up
    return {
        "compile": compiled,
        "steps": steps,
        "wall_s": round(time.perf_counter() - started, 1),
        "first_step_tok_s": round(rates[0]),
        "steady_median_tok_s": round(statistics.median(steady)),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
    }


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--dir", default="/tmp/stage")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    target = save_random_llama(root / "target", LLAMA_1_5B_VOCAB_32K)
    data = long_conversations(root / "chats.jsonl", 96, 1000)
    ctx = StageContext(work_dir=root, sink=RecordingSink())
    extract.run(ctx, ExtractParams(target=str(target), data=str(data), output=str(root / "hs"), max_len=2048))
    runs = []
    for compiled in (False, True):
        torch.cuda.reset_peak_memory_stats()
        runs.append(run_train(root, target, args.steps, compiled))
        print(json.dumps(runs[-1]), flush=True)
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"device": torch.cuda.get_device_name(), "batch": 2, "seq": 2048, "runs": runs}))


if __name__ == "__main__":
    main()
