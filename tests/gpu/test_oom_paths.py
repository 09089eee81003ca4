"""Out-of-memory on a real GPU (prints JSON): the extract and train stages given batches that cannot fit
must fail with OUT_OF_MEMORY naming the batch that failed, release the GPU memory, and the same process
must then train with the smaller batch the message advises.

A random 1.5B-shaped Llama target (hidden 2048, 16 layers, vocab 32,000) with the demo's word-level
tokenizer; conversations of ~2,000 tokens made here.

    python bench/gpu/oom_paths.py [--dir /tmp/oom]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.bench_extract import FULL

from contract.params.extract import ExtractParams
from contract.params.train import TrainParams
from drafting.ml.demo_assets import build_tokenizer, chat, write_jsonl
from drafting.stages import extract, train
from drafting.stages.base import RecordingSink, StageContext, StageError

# bench_extract's 1.5B shape with a 32k vocab (the drafter's lm_head rows come from the target's)
TARGET = {**FULL, "vocab_size": 32000}


def make_target(folder: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**TARGET)).to(torch.bfloat16).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


def conversations(path: Path, count: int, words: int) -> Path:
    rng = random.Random(0)
    return write_jsonl(path, [chat(rng, turns=1, words=words) for _ in range(count)])


def attempt(name: str, fn: Any) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result = fn()
        figures = {k: v for k, v in result.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        outcome: dict[str, Any] = {"outcome": "succeeded", **figures}
    except StageError as exc:
        outcome = {"outcome": "failed", "reason": str(exc.reason), "message": exc.message, **exc.details}
    gc.collect()
    torch.cuda.empty_cache()
    outcome["seconds"] = round(time.perf_counter() - started, 1)
    outcome["gpu_allocated_after_gib"] = round(torch.cuda.memory_allocated() / 2**30, 2)
    outcome["gpu_reserved_after_gib"] = round(torch.cuda.memory_reserved() / 2**30, 2)
    print(name, json.dumps(outcome), flush=True)
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="/tmp/oom")
    args = parser.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    ctx = StageContext(work_dir=root, sink=RecordingSink())
    target = make_target(root / "target")
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "target": TARGET}

    huge = conversations(root / "huge.jsonl", 1024, 2000)  # ~4M tokens in one batch: cannot fit
    out["extract_oom"] = attempt(
        "extract_oom",
        lambda: extract.run(
            ctx,
            ExtractParams(
                target=str(target), data=str(huge), output=str(root / "hs_huge"), batch_size=1024,
                max_len=4096, disk_free_override_bytes=10**15,
            ),
        ),
    )  # fmt: skip
    data = conversations(root / "chats.jsonl", 96, 1000)
    out["extract"] = attempt(
        "extract",
        lambda: extract.run(
            ctx, ExtractParams(target=str(target), data=str(data), output=str(root / "hs"), max_len=2048)
        ),
    )
    common = {"data": str(root / "hs"), "target": str(target), "max_len": 2048, "draft_vocab_size": 32000}
    out["train_oom"] = attempt(
        "train_oom",
        lambda: train.run(
            ctx, TrainParams(**common, output=str(root / "run_big"), batch_size=96, val_fraction=0)
        ),
    )
    out["train_after_oom"] = attempt(
        "train_after_oom",
        lambda: train.run(
            ctx, TrainParams(**common, output=str(root / "run_small"), batch_size=2, max_steps=4)
        ),
    )
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
