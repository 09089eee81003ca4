"""Data-parallel training on two real GPUs (prints JSON): the train stage as two torchrun ranks over NCCL,
against one process on the global batch (the CPU test's check, tests/ml/test_ranks.py, on GPUs).

    python bench/gpu/ddp_two_gpus.py [--dir /tmp/ddp]      # a machine with 2 GPUs
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from contract.params.train import TrainParams
from drafting.ml.train_state import load_state
from drafting.stages import train
from drafting.stages.base import RecordingSink, StageContext
from tests.ml.tiny import TINY_CONFIG, successor_extraction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="/tmp/ddp")
    root = Path(parser.parse_args().dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    target, data = successor_extraction(root, conversations=2, turns=1, words=10, seed=3, max_len=64)
    common = {
        "target": str(target), "data": str(data), "device": "cuda", "dtype": "float32", "ttt_steps": 2,
        "lr": 1e-2, "warmup_steps": 0, "schedule": "constant", "val_fraction": 0.0, "epochs": 4,
        "draft_vocab_size": TINY_CONFIG["vocab_size"], "loader_workers": 0, "compile": False,
    }  # fmt: skip
    out: dict[str, object] = {}
    losses = {}
    for name, gpus, batch in (("one_gpu_batch_2", (0,), 2), ("two_ranks_batch_1", (0, 1), 1)):
        sink = RecordingSink()
        started = time.perf_counter()
        params = TrainParams(**common, output=str(root / name), batch_size=batch)
        result = train.run(StageContext(work_dir=root / f"work_{name}", sink=sink, gpus=gpus), params)
        losses[name] = {e["step"]: e["value"] for e in sink.of_type("metric") if e["name"] == "train/loss"}
        out[name] = {"seconds": round(time.perf_counter() - started, 1), "global_step": result["global_step"]}
    one, two = (load_state(root / n)["drafter"] for n in ("one_gpu_batch_2", "two_ranks_batch_1"))  # type: ignore[index]
    out["losses"] = losses
    out["max_loss_rel_diff"] = max(
        abs(losses["two_ranks_batch_1"][s] - v) / abs(v) for s, v in losses["one_gpu_batch_2"].items()
    )
    out["max_weight_abs_diff"] = max(
        float((one[k] - two[k]).abs().max()) for k in one if one[k].is_floating_point()
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
