"""The train stage compiled and eager on a GPU, on data of many lengths: does the compiled run stay compiled
(one static graph per padded length) and learn what the eager one learns, and how much faster is it?

GPU run 7 found the stage's compile broken on real data: at the first batch of a new length dynamo
recompiled with dynamic shapes and torch 2.11's Inductor could not lower FlexAttention. The stage now
compiles static graphs and falls back to eager at any step. This proves the first on a GPU and times both.

The target is constructed (the successor rule, at SmolLM2-135M's width and depth by default): a plumbing and
speed check, not a quality claim. Prints and writes OUT/compile_check.json.

    python3 bench/gpu/compile_check.py WORK OUT [--conversations 600] [--epochs 3] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import torch  # noqa: E402
from e2e_pipeline import successor_chat  # noqa: E402

from contract.params.extract import ExtractParams  # noqa: E402
from contract.params.train import TrainParams  # noqa: E402
from drafting.ml.demo_assets import successor_target, write_jsonl  # noqa: E402
from drafting.stages import extract, train  # noqa: E402
from drafting.stages.base import RecordingSink, StageContext  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--conversations", type=int, default=600)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-words", type=int, default=150, help="60 and 2 turns: 3 padded lengths")
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    work, out = args.work.resolve(), args.out
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    heads = args.hidden // 64
    target = successor_target(
        work / "target", hidden=args.hidden, heads=heads, kv_heads=max(1, heads // 3), layers=args.layers,
        intermediate=round(2.67 * args.hidden / 64) * 64, dtype=torch.bfloat16, device=args.device,
    )  # fmt: skip
    rng = random.Random(0)  # 1-3 turns of 8-150 words: padded lengths across most of the 128-token buckets
    chats = [
        successor_chat(rng, turns=rng.randint(1, args.max_turns), words=rng.randint(8, args.max_words))
        for _ in range(args.conversations)
    ]
    data = write_jsonl(work / "chats.jsonl", chats)
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    extraction = extract.run(
        StageContext(work_dir=work),
        ExtractParams(
            target=str(target), data=str(data), output=str(work / "hs"), device=args.device, dtype=dtype,
            max_len=1024,
        ),
    )  # fmt: skip
    report: dict[str, Any] = {"extract": extraction, "target": {"hidden": args.hidden, "layers": args.layers}}
    for compiled in (True, False):
        name = "compiled" if compiled else "eager"
        report[name] = _train(args, work, target, compiled, dtype)
        if compiled:  # graphs dynamo made (one per padded length and grad mode, when static)
            report[name]["dynamo_stats"] = dict(torch._dynamo.utils.counters["stats"])
        summary = {m: v for m, v in report[name].items() if m != "result"}
        print(name, json.dumps(summary), flush=True)
        (out / "compile_check.json").write_text(json.dumps(report, indent=1))  # kept if the call is cut
    report["wall_s"] = time.monotonic() - began
    (out / "compile_check.json").write_text(json.dumps(report, indent=1))


def _train(args: argparse.Namespace, work: Path, target: Path, compiled: bool, dtype: str) -> dict[str, Any]:
    name = "compiled" if compiled else "eager"
    params = TrainParams(
        target=str(target), data=str(work / "hs"), output=str(work / name), device=args.device, dtype=dtype,
        epochs=args.epochs, batch_size=args.batch_size, lr=1e-3, ttt_steps=7, max_len=1024,
        draft_vocab_size=64, compile=compiled,
    )  # fmt: skip
    sink = RecordingSink()
    started = time.monotonic()
    result = train.run(StageContext(work_dir=work, sink=sink), params)
    wall = time.monotonic() - started
    rates = [e["value"] for e in sink.of_type("metric") if e["name"] == "train/tokens_per_s"]
    last = result["epochs"][-1]
    return {
        "wall_s": round(wall, 1),
        "steps": result["global_step"],
        "compile": result.get("compile"),
        "tokens_per_s_last_logs": rates[-5:],
        "val_acc_0": last.get("val/acc_0"),
        "val_sim_accept_len_d5": last.get("val/sim_accept_len_d5"),
        "result": result,
    }


if __name__ == "__main__":
    main()
