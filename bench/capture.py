"""extract's two backends on the same samples, on a GPU host with sglang 0.5.14 (prints JSON): the states the
SGLang backend stores against the HF backend's, value by value; the tokens/s of each; and SGLang's own prefill
throughput on the same model (`python -m sglang.bench_one_batch`, output length 1, the samples' mean input
length and the extraction's batch size) as the yardstick.

    python -m bench.capture (--target /models/SmolLM2-135M-Instruct | --random-llama | --zoo gemma3_text)
        [--data chats.jsonl]
        [--samples 256] [--max-len 2048] [--batch-size 8] [--dtype bfloat16] [--tp-size 1]
        [--attention-backend triton] [--rel-tol 0.02] [--dir /tmp/bench_capture] [--no-prefill-yardstick]

Run it from the repository root (the SGLang backend starts its ranks as `python -m workers.stage_main`).
Without --data it writes --samples synthetic conversations of --words words per turn.

Compared per stored state (aux_0, aux_1, aux_2, last) over every token of every sample: the relative L2
error ||sglang - hf|| / ||hf||, the largest absolute difference and the largest absolute value. The two
engines run different kernels (attention, fused norms, all-reduce), so in bf16 the states agree to rounding
that grows with depth, not bit for bit; --rel-tol bounds the relative error. Exit 1, naming the states past it
(or a sample whose token ids differ); exit 2 when a run fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import torch

from bench import _cli as cli
from cli.demo.constructed import chat, write_jsonl
from contract.params.extract import ExtractParams
from drafting.context import StageContext, StageError
from drafting.ml._dataset import read_dataset_rows
from drafting.ml.hidden_store import STATES_PER_TOKEN, load_sample, read_manifest
from drafting.stages import extract
from testsupport import target_zoo
from testsupport.random_llama import LLAMA_1_5B, save_random_llama

STATE_NAMES = ("aux_0", "aux_1", "aux_2", "last")


class TimedSink:
    """Keeps the stage's events with the time they arrived: the steady rate is measured between the first and
    the last progress report that came after states began to land (model loading excluded)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append((time.perf_counter(), event))

    def steady_tokens_per_s(self, total_tokens: int) -> float | None:
        points = [
            (at, e["fraction"] * total_tokens)
            for at, e in self.events
            if e.get("type") == "progress" and e.get("fraction", 0) > 0 and "tok/s" in e.get("message", "")
        ]
        if len(points) < 2 or points[-1][0] <= points[0][0]:
            return None
        return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def run_extract(root: Path, name: str, values: dict[str, Any], gpus: tuple[int, ...]) -> dict[str, Any]:
    sink = TimedSink()
    params = ExtractParams(**values, output=str(root / name))
    started = time.perf_counter()
    result = extract.run(StageContext(work_dir=root / f"work_{name}", sink=sink, gpus=gpus), params)
    wall = time.perf_counter() - started
    steady = sink.steady_tokens_per_s(result["tokens"])
    return {
        "output": str(root / name),
        "samples": result["samples"],
        "tokens": result["tokens"],
        "wall_s": round(wall, 1),
        "tokens_per_s_with_loading": round(result["tokens"] / wall),
        "tokens_per_s_stage": round(result["tokens_per_s"]),
        "tokens_per_s_steady": round(steady) if steady is not None else None,
    }


def compare(hf: Path, sglang: Path) -> dict[str, Any]:
    """Per state: relative L2 error, largest absolute difference and value, over every token."""
    hf_rows, sglang_rows = read_dataset_rows(hf)[0], read_dataset_rows(sglang)[0]
    if hf_rows != sglang_rows:
        raise SystemExit("the two extractions tokenized the data differently: nothing to compare")
    diff2 = torch.zeros(STATES_PER_TOKEN, dtype=torch.float64)
    ref2 = torch.zeros(STATES_PER_TOKEN, dtype=torch.float64)
    max_diff = torch.zeros(STATES_PER_TOKEN, dtype=torch.float64)
    max_ref = torch.zeros(STATES_PER_TOKEN, dtype=torch.float64)
    mismatched_ids = []
    for index in range(len(hf_rows)):
        theirs, ours = load_sample(hf, index), load_sample(sglang, index)
        if not torch.equal(theirs["token_ids"], ours["token_ids"]):
            mismatched_ids.append(index)
            continue
        reference = theirs["hidden_states"].double()  # [seq, 4, T]
        delta = ours["hidden_states"].double() - reference
        diff2 += delta.pow(2).sum(dim=(0, 2))
        ref2 += reference.pow(2).sum(dim=(0, 2))
        max_diff = torch.maximum(max_diff, delta.abs().amax(dim=(0, 2)))
        max_ref = torch.maximum(max_ref, reference.abs().amax(dim=(0, 2)))
    states = {
        name: {
            "rel_l2": float((diff2[i] / ref2[i].clamp_min(1e-30)).sqrt()),
            "max_abs_diff": float(max_diff[i]),
            "max_abs_value": float(max_ref[i]),
        }
        for i, name in enumerate(STATE_NAMES)
    }
    return {"samples": len(hf_rows), "token_id_mismatches": mismatched_ids, "states": states}


def sglang_prefill(args: argparse.Namespace, input_len: int) -> dict[str, Any]:
    """SGLang's own prefill throughput on the same model: bench_one_batch, one batch, one output token."""
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "result.jsonl"
        argv = [
            sys.executable, "-m", "sglang.bench_one_batch", "--model-path", args.target,
            "--batch-size", str(args.batch_size), "--input-len", str(input_len), "--output-len", "1",
            "--tp-size", str(args.tp_size), "--dtype", args.dtype, "--sampling-backend", "pytorch",
            "--result-filename", str(results),
        ]  # fmt: skip
        if args.attention_backend:
            argv += ["--attention-backend", args.attention_backend]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0 or not results.exists():
            return {"error": f"exit {done.returncode}", "log_tail": (done.stdout + done.stderr)[-2000:]}
        row = json.loads(results.read_text().splitlines()[-1])
    return {
        "command": "python -m sglang.bench_one_batch (output length 1)",
        "batch_size": args.batch_size,
        "input_len": input_len,
        "prefill_tokens_per_s": round(row["prefill_throughput"]),
        "prefill_latency_s": round(row["prefill_latency"], 4),
    }


def conversations(path: Path, count: int, words: int) -> Path:
    rng = random.Random(0)
    return write_jsonl(path, [chat(rng, turns=1 + i % 3, words=words) for i in range(count)])


def parse_args() -> argparse.Namespace:
    parser = cli.parser(__doc__)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--target", help="target model folder (HF layout)")
    target.add_argument(
        "--random-llama",
        action="store_true",
        help="a random 1.53 B Llama (testsupport/random_llama.py LLAMA_1_5B), built into --dir/target",
    )
    target.add_argument(
        "--zoo",
        choices=sorted(target_zoo.SERVED),
        help="a target of the test zoo (testsupport/target_zoo.py) at hidden 256, head_dim 64, built into "
        "--dir/target",
    )
    parser.add_argument("--data", help="conversations JSONL (default: synthetic ones)")
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the target folder)")
    parser.add_argument("--samples", type=int, default=256, help="conversations extracted by each backend")
    parser.add_argument("--words", type=int, default=300, help="words per turn of the synthetic data")
    parser.add_argument("--max-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--tp-size", type=int, default=1, help="GPUs of the SGLang backend's group")
    parser.add_argument("--attention-backend", help="SGLang's attention kernels (triton without flashinfer)")
    parser.add_argument("--mem-fraction-static", type=float)
    parser.add_argument("--rel-tol", type=float, default=0.02, help="largest relative L2 error per state")
    parser.add_argument("--dir", default="/tmp/bench_capture")
    parser.add_argument("--no-prefill-yardstick", action="store_true", help="skip sglang.bench_one_batch")
    return parser.parse_args()


def report_stream() -> TextIO:
    """stdout for the JSON report alone: the stages and their torchrun ranks log to fd 1, which now goes to
    stderr, so `python -m bench.capture … > report.json` holds JSON only."""
    sys.stdout.flush()
    stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return stream


def main() -> int:
    args = parse_args()
    out = report_stream()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    if args.random_llama:
        args.target = str(save_random_llama(root / "target", LLAMA_1_5B))
    if args.zoo:
        args.target = str(target_zoo.build(args.zoo, root / "target", sizes=target_zoo.SGLANG_SIZES))
    data = Path(args.data) if args.data else conversations(root / "chats.jsonl", args.samples, args.words)
    common: dict[str, Any] = {
        "target": str(Path(args.target).resolve()), "data": str(data.resolve()), "limit": args.samples,
        "max_len": args.max_len, "batch_size": args.batch_size, "dtype": args.dtype, "device": "cuda",
    }  # fmt: skip
    if args.tokenizer:
        common["tokenizer"] = str(Path(args.tokenizer).resolve())
    sglang_only = {
        "attention_backend": args.attention_backend,
        "mem_fraction_static": args.mem_fraction_static,
    }
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "target": args.target,
        "tp_size": args.tp_size,
    }
    try:
        # SGLang first, in its own processes, so the HF run (in this process) holds no GPU memory beside it.
        report["sglang"] = run_extract(
            root, "sglang", {**common, "backend": "sglang", "tp_size": args.tp_size,
                             **{k: v for k, v in sglang_only.items() if v is not None}},
            tuple(range(args.tp_size)),
        )  # fmt: skip
        if not args.no_prefill_yardstick:
            rows = read_dataset_rows(Path(report["sglang"]["output"]))[0]
            report["sglang_prefill"] = sglang_prefill(args, round(sum(map(len, rows)) / len(rows)))
        report["hf"] = run_extract(root, "hf", {**common, "backend": "hf"}, (0,))
    except StageError as exc:
        report["error"] = {"reason": str(exc.reason), "message": exc.message}
        print(json.dumps(report, indent=2), file=out, flush=True)
        return 2
    manifests = {name: read_manifest(root / name) or {} for name in ("hf", "sglang")}
    for key in ("aux_layers", "sglang_aux_layer_ids"):
        report[key] = {name: manifest.get(key) for name, manifest in manifests.items()}
    report["comparison"] = compare(root / "hf", root / "sglang")
    prefill = report.get("sglang_prefill", {}).get("prefill_tokens_per_s")
    steady = report["sglang"]["tokens_per_s_steady"]
    if prefill and steady:
        report["sglang_extract_over_prefill"] = round(steady / prefill, 3)
    failures = [
        f"{name}: relative L2 error {state['rel_l2']:.4f} > {args.rel_tol}"
        for name, state in report["comparison"]["states"].items()
        if not math.isfinite(state["rel_l2"]) or state["rel_l2"] > args.rel_tol
    ]
    if report["comparison"]["token_id_mismatches"]:
        failures.append(f"token ids differ in samples {report['comparison']['token_id_mismatches'][:10]}")
    if report["aux_layers"]["hf"] != report["aux_layers"]["sglang"]:
        failures.append(f"aux layers differ: {report['aux_layers']}")
    report["ok"] = not failures
    report["failures"] = failures
    print(json.dumps(report, indent=2), file=out, flush=True)
    if failures:
        print("MISMATCH between the SGLang and HF backends: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
