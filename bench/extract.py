"""Extraction throughput of eyas's extract engine beside its two physical limits, measured in one run.

Default shape: a ~1.5B random-init Llama (hidden 2048, 16 layers, intermediate 8192, 16/8 heads, vocab
128,256), bf16, batches of 8 x 2048 tokens on one GPU. Three figures:

* bare forward: the decoder stack alone, no capture, nothing copied back;
* disk, as the writer uses it (the yardstick each run is judged against): before each engine run, the same
  bytes written the way that run's writer writes them: one file per sample of the sample's size, as many
  threads, each file written to a temporary name, flushed (`fdatasync`, durable runs) and renamed into
  place, then a final sync. Large files with one sync at the end are another pattern, whose figure can
  miss the writer's either way; it is still printed (`disk_sequential_gb_s`), for reference only;
* extract: the real engine (`extract_batches`: capture hooks, pinned side-stream copy, `AsyncWriter`
  threads), including the final sync, so the bytes are on disk when the clock stops. One run per
  `--variants` entry, `durable:N` (N writer threads, each file flushed before its rename: the stage's
  default) or `end:N` (no per-file flush; everything reaches the disk in the final sync). An untimed
  warm-up pass first fills torch's pinned host-memory cache, so no variant pays for it and the figures
  describe a long run's steady state.

Each run's limit is min(bare forward, its own disk figure / bytes per token); `fraction_of_limit` is what
the engine reaches of it, and a fraction above 1 would mean the yardstick still undercounts.

    python -m bench.extract [--dir /path/on/the/output/disk] [--batches 48] [--variants durable:4,end:4]
    python -m bench.extract --small                                            # CPU, under a minute
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bench import _cli as cli
from drafting.ml._writer import AsyncWriter
from drafting.ml.capture import decoder_of, extraction_indices
from drafting.ml.extraction import PendingSample, extract_batches
from drafting.ml.hidden_store import HIDDEN_DIR, bytes_per_token
from testsupport.random_llama import LLAMA_1_5B

FULL = LLAMA_1_5B
SMALL = {**FULL, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 8}
SMALL.update(num_attention_heads=4, num_key_value_heads=2, vocab_size=1024, max_position_embeddings=1024)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def bare_forward(model: torch.nn.Module, ids: torch.Tensor, batches: int) -> float:
    decoder = decoder_of(model)
    with torch.inference_mode():
        for _ in range(2):
            decoder(input_ids=ids, use_cache=False)
        _sync(ids.device)
        started = time.perf_counter()
        for _ in range(batches):
            decoder(input_ids=ids, use_cache=False)
        _sync(ids.device)
    return ids.numel() * batches / (time.perf_counter() - started)


def disk_bandwidth(folder: Path, total_bytes: int, threads: int) -> float:
    """Bytes/s of `threads` writers each streaming 64 MB files from memory, synced at the end."""
    block = bytearray(os.urandom(1 << 20)) * 64
    files = max(1, total_bytes // len(block))
    folder.mkdir(parents=True, exist_ok=True)

    def write(worker: int) -> None:
        for i in range(worker, files, threads):
            with (folder / f"blob_{i}").open("wb") as handle:
                handle.write(block)

    return files * len(block) / _timed_writers(write, threads, folder)


def writer_pattern_disk(folder: Path, file_bytes: int, files: int, threads: int, *, durable: bool) -> float:
    """Bytes/s of `threads` writers each writing whole sample-sized files as drafting/ml/_writer.py does
    (a temporary name, fdatasync when durable, a rename), synced at the end."""
    payload = os.urandom(file_bytes)
    folder.mkdir(parents=True, exist_ok=True)
    os.sync()  # the previous step's dirty pages are not this measurement's cost

    def write(worker: int) -> None:
        for i in range(worker, files, threads):
            final = folder / f"hs_{i}.safetensors"
            temporary = final.with_name(f"{final.name}.tmp-{worker}")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                if durable:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
            os.rename(temporary, final)

    return files * file_bytes / _timed_writers(write, threads, folder)


def _timed_writers(write: Callable[[int], None], threads: int, folder: Path) -> float:
    """Seconds for `threads` threads running write(worker) and the sync after them; the folder removed."""
    started = time.perf_counter()
    pool = [threading.Thread(target=write, args=(w,)) for w in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    os.sync()
    elapsed = time.perf_counter() - started
    shutil.rmtree(folder)
    return elapsed


def engine(
    model: torch.nn.Module,
    args: argparse.Namespace,
    folder: Path,
    device: torch.device,
    *,
    batches_count: int,
    writers: int,
    durable: bool,
) -> float:
    layers = model.config.num_hidden_layers
    indices = extraction_indices([2, layers // 2, layers - 3], layers)
    vocab = model.config.vocab_size
    samples = [
        PendingSample(i, torch.randint(0, vocab, (args.seq,)).tolist())
        for i in range(args.batch * batches_count)
    ]
    batches = [samples[i : i + args.batch] for i in range(0, len(samples), args.batch)]
    (folder / HIDDEN_DIR).mkdir(parents=True, exist_ok=True)
    os.sync()  # start from a clean page cache: the previous run's dirty pages are not this run's cost
    writer = AsyncWriter(folder, threads=writers, depth=args.depth, durable=durable)
    started = time.perf_counter()
    extract_batches(
        model,
        batches,
        indices=indices,
        device=device,
        writer=writer,
        check_cancelled=lambda: None,
        on_written=lambda done: None,
    )
    writer.close()
    os.sync()
    elapsed = time.perf_counter() - started
    shutil.rmtree(folder)
    return len(samples) * args.seq / elapsed


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--small", action="store_true", help="tiny model on CPU")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="a folder on the disk to measure")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--writers", type=int, default=4, help="threads of the disk bandwidth test")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--variants", default="durable:4,end:4", help="engine runs: durable:N or end:N")
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    cuda = torch.cuda.is_available() and not args.small
    device, dtype = (torch.device("cuda"), torch.bfloat16) if cuda else (torch.device("cpu"), torch.float32)
    if args.small:
        torch.set_num_threads(1)  # shared CPU boxes: intra-op threads spin against each other
        args.batch, args.seq, args.batches = 4, 256, 6
    config = LlamaConfig(**(SMALL if args.small else FULL))
    model = LlamaForCausalLM(config).to(device, dtype).eval()
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=device)
    per_token = bytes_per_token(config.hidden_size, dtype)
    work = Path(tempfile.mkdtemp(prefix="eyas-bench-", dir=args.dir))
    forward = bare_forward(model, ids, args.batches)
    disk = disk_bandwidth(work / "disk", per_token * args.batch * args.seq * args.batches, args.writers)
    warm = args.depth + args.writers + 2
    engine(model, args, work / "warm", device, batches_count=warm, writers=args.writers, durable=False)
    runs = []
    for variant in args.variants.split(","):
        mode, threads = variant.split(":")
        durable = mode == "durable"
        samples = args.batch * args.batches
        pattern = writer_pattern_disk(
            work / "pattern", per_token * args.seq, samples, int(threads), durable=durable
        )
        limit = min(forward, pattern / per_token)
        rate = engine(
            model, args, work / "extract", device,
            batches_count=args.batches, writers=int(threads), durable=durable,
        )  # fmt: skip
        runs.append({
            "variant": variant,
            "disk_pattern_gb_s": round(pattern / 1e9, 3),
            "limit_tok_s": round(limit),
            "bound_by": "disk" if pattern / per_token < forward else "forward",
            "extract_tok_s": round(rate),
            "fraction_of_limit": round(rate / limit, 3),
        })  # fmt: skip
    work.rmdir()
    print(json.dumps({
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 2),
        "batch": args.batch, "seq": args.seq, "batches": args.batches, "depth": args.depth,
        "bytes_per_token": per_token,
        "bare_forward_tok_s": round(forward),
        "disk_sequential_gb_s": round(disk / 1e9, 3),  # large files, one sync: for reference only
        "runs": runs,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
