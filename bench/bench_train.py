"""Training throughput of eyas's EAGLE-3 trainer step, and its model FLOPs utilisation.

Default shape: a drafter for an 8B target (H 4096, intermediate 14,336, 32/8 heads, vocab 128,256, draft vocab
32k), TTT 7, seq 2048, bf16, on one GPU. It runs the real `Trainer.step` (target soft targets from a random
lm_head, the 7-step unroll with the real TTT attention, soft cross-entropy, AdamW) on synthetic batches, and
measures the bf16 matmul peak in the same process, so the MFU does not depend on a datasheet figure.

    python bench/bench_train.py [--batch 2] [--seq 2048] [--compile]   # GPU
    python bench/bench_train.py --small                                  # CPU, under a minute
    python bench/bench_train.py --pack [--compile]                       # + packed vs unpacked, same run
    python bench/bench_train.py --compile --profile --yardstick ../shared/gpu/drafter_step_bench.py
        # + where a step's kernel time goes, and the yardstick run after it in the same command

`--pack` adds `pack`: samples of ShareGPT-like lengths (log-normal, median seq/4, cut to seq), batched as the
train stage does (unpacked: `batch` samples padded to the longest, rounded up to 128 on a GPU; packed:
`batch` rows of up to `seq` tokens), and real (unpadded) tokens/s of each over the same number of steps.

`--stage-recipe` adds `stage_recipe`: a step with the train stage's default recipe (`norm_output` on, lm_head
frozen; docs/design/default-training-recipe.md), which skips the head's weight gradient, so it does less work
than the yardstick; the main figures keep the yardstick's work (the head trained).

`--profile` adds `profile`: torch.profiler over `--steps` more steps, kernel time per step by kind of kernel
(attention, matmul, loss, optimizer, norm, other) and the top kernels: what limits the step. `--yardstick
PATH` runs that script (the shared drafter_step_bench.py, `PATH BATCH`) after eyas's steps, in a child
process of the same command, and adds its JSON and eyas's tokens/s over its compiled figure (the goal:
≥ 0.95).

`step_ms`, `tokens_per_s` and `mfu` are a step of any epoch after a sample's first, which reads the target's
argmax kept from that first step and multiplies by the draft vocab's rows of lm_head alone; `first_epoch_*`
is a step that runs the full-vocab head (drafting/ml/argmax_cache.py). A run of E epochs averages one first
step and E - 1 later ones per sample.

Prints one JSON object. Model FLOPs count the drafter only (fc, 7 x (qkv, o, MLP, lm_head, causal
attention)), x3 for forward + backward; the target head's full-vocab matmul is extra work, reported apart.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contract.params.train import TrainParams
from drafting.ml.argmax_cache import ArgmaxCache
from drafting.ml.drafter import Eagle3Drafter
from drafting.ml.packing import epoch_packs, packing_report, row_layout
from drafting.ml.target_head import TargetHead
from drafting.ml.train_data import Batch, epoch_batches
from drafting.ml.trainer import OptimSettings, Trainer, make_optimizer

EIGHT_B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
}
SMALL = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 4096,
    "draft_vocab_size": 1024,
}


def drafter_config(shape: dict[str, int]) -> dict[str, Any]:
    return {
        **shape,
        "architectures": ["LlamaForCausalLMEagle3"],
        "head_dim": shape["hidden_size"] // shape["num_attention_heads"],
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
    }


def model_flops_per_token(shape: dict[str, int], seq: int, ttt: int) -> float:
    h, inter = shape["hidden_size"], shape["intermediate_size"]
    heads, kv = shape["num_attention_heads"], shape["num_key_value_heads"]
    head_dim = h // heads
    per_pass = (
        2 * (2 * h) * (heads + 2 * kv) * head_dim  # q/k/v from the 2H input
        + 2 * h * h  # o_proj
        + 3 * 2 * h * inter  # gate, up, down
        + 2 * h * shape["draft_vocab_size"]  # lm_head
        + 2 * seq * h  # causal attention: QK^T and PV over half the sequence on average
    )
    return 3.0 * (2 * 3 * h * h + ttt * per_pass)  # fc once; forward + backward = 3 x forward


def matmul_peak_tflops(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _sync(device)
    return 2 * size**3 * repeats / (time.perf_counter() - started) / 1e12


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def build(
    shape: dict[str, int],
    args: argparse.Namespace,
    device: torch.device,
    dtype: torch.dtype,
    recipe: dict[str, bool] | None = None,
) -> Trainer:
    """The trainer at `shape`: with the lm_head trained and no norm_output (the yardstick's work, and runs
    10-13's), or with `recipe`'s `norm_output` and `train_lm_head` as the train stage applies them."""
    recipe = recipe or {"norm_output": False, "train_lm_head": True}
    torch.manual_seed(0)
    drafter = Eagle3Drafter({**drafter_config(shape), "norm_output": recipe["norm_output"]})
    if not recipe["train_lm_head"]:  # as the stage freezes it: the optimizer takes what requires grad
        drafter.lm_head.weight.requires_grad_(False)
    drafter.set_vocab_mapping(
        torch.arange(shape["draft_vocab_size"]) * 3 - torch.arange(shape["draft_vocab_size"])
    )
    drafter.to(device)
    drafter.embed_tokens.to(dtype)
    h, vocab = shape["hidden_size"], shape["vocab_size"]
    head = TargetHead(  # the 8B shape's head as loose tensors, behind a Llama final norm
        torch.empty(0),
        torch.randn(vocab, h, device=device, dtype=dtype) * 0.02,
        LlamaRMSNorm(h, 1e-5).to(device),
    )
    settings = OptimSettings(
        lr=1e-4, warmup_steps=0, total_steps=1000, schedule="constant", weight_decay=0.0, grad_clip=0.5
    )
    optimizer, scheduler = make_optimizer(drafter, settings, device)
    return Trainer(
        drafter,
        head,
        optimizer=optimizer,
        scheduler=scheduler,
        settings=settings,
        ttt_steps=args.ttt,
        step_decay=0.8,
        attention=args.attention,
        compute_dtype=dtype,
        device=device,
        compile_drafter=args.compile,
    )


def synthetic_batch(shape: dict[str, int], args: argparse.Namespace, device: torch.device) -> Batch:
    b, s, h = args.batch, args.seq, shape["hidden_size"]
    return Batch(
        input_ids=torch.randint(0, shape["vocab_size"], (b, s), device=device),
        loss_mask=torch.ones(b, s, dtype=torch.bool, device=device),
        hidden=torch.randn(b, s, 4, h, device=device, dtype=torch.bfloat16),
        lengths=torch.full((b,), s, device=device),
        samples=tuple(((row, s),) for row in range(b)),  # dataset rows, as the stage's batches name them
    )


def time_steps(trainer: Trainer, batch: Batch, warmup: int, steps: int) -> float:
    for i in range(warmup):
        trainer.step(batch, i)
    _sync(trainer.device)
    started = time.perf_counter()
    for i in range(steps):
        trainer.step(batch, warmup + i)
    _sync(trainer.device)
    return (time.perf_counter() - started) / steps


def sample_lengths(count: int, seq: int, seed: int = 0) -> list[int]:
    """ShareGPT-like lengths: log-normal around seq/4, at least 16 tokens, cut to seq."""
    rng = torch.Generator().manual_seed(seed)
    lengths = (torch.randn(count, generator=rng) + torch.tensor(seq / 4).log()).exp()
    return [int(n) for n in lengths.clamp(16, seq).tolist()]


def planned_batch(rows: list[list[int]], packed: bool, shape: dict[str, int], device: torch.device) -> Batch:
    """A synthetic batch of rows holding samples of these lengths, padded as the stage's Collate pads."""
    pad = 128 if device.type == "cuda" else 1
    filled = [sum(row) for row in rows]
    seq = -(-max(filled) // pad) * pad
    b, h = len(rows), shape["hidden_size"]
    positions = torch.arange(seq, device=device)[None]
    real = positions < torch.tensor(filled, device=device)[:, None]
    return Batch(
        input_ids=torch.randint(0, shape["vocab_size"], (b, seq), device=device) * real,
        loss_mask=real,
        hidden=torch.randn(b, seq, 4, h, device=device, dtype=torch.bfloat16),
        lengths=torch.tensor(filled, device=device),
        layout=row_layout(rows, seq).to(device) if packed else None,
    )


def pack_comparison(
    trainer: Trainer, shape: dict[str, int], args: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    """Real tokens/s unpacked and packed, `args.steps` timed steps each after `args.warmup`."""
    needed = args.warmup + args.steps
    lengths = sample_lengths(needed * args.batch * 8, args.seq)  # enough for `needed` packed batches
    samples = list(range(len(lengths)))
    unpacked = epoch_batches(samples, lengths, batch_size=args.batch, epoch=0, seed=0)[:needed]
    packed = epoch_packs(samples, lengths, rows_per_batch=args.batch, row_len=args.seq, epoch=0, seed=0)
    packed = packed[:needed]
    pad_multiple = 128 if device.type == "cuda" else 1
    report = packing_report(packed, unpacked, lengths, row_len=args.seq, pad_multiple=pad_multiple)
    plans = {
        "unpacked": [[[lengths[i]] for i in batch] for batch in unpacked],
        "packed": [[[lengths[i] for i in row] for row in batch] for batch in packed],
    }
    results: dict[str, Any] = {"median_sample_tokens": sorted(lengths)[len(lengths) // 2]}
    for name, plan in plans.items():
        batches = [planned_batch(rows, name == "packed", shape, device) for rows in plan]
        results[name] = measure(trainer, batches, args.warmup)
        timed_samples = sum(len(row) for rows in plan[args.warmup :] for row in rows)
        results[name]["samples_per_step"] = round(timed_samples / args.steps, 2)
    results["unpacked"]["padding_fraction"] = round(report.unpacked_padding_fraction, 4)
    results["packed"]["padding_fraction"] = round(report.padding_fraction, 4)
    speedup = results["packed"]["tokens_per_s"] / results["unpacked"]["tokens_per_s"]
    results["packed_over_unpacked_tokens_per_s"] = round(speedup, 3)
    return results


def stage_recipe_steps(
    shape: dict[str, int], args: argparse.Namespace, device: torch.device, dtype: torch.dtype
) -> dict[str, Any]:
    """A step with the train stage's default recipe (`norm_output` on, lm_head frozen, as speculators
    trains), after a sample's first epoch. A frozen lm_head skips its weight gradient, one
    matmul of the draft vocab per TTT pass: less work than the yardstick's step, and what users run."""
    fields = TrainParams.model_fields
    recipe = {key: bool(fields[key].default) for key in ("norm_output", "train_lm_head")}
    trainer = build(shape, args, device, dtype, recipe)
    batch = synthetic_batch(shape, args, device)
    step_s = time_steps(trainer, batch, args.warmup, args.steps)  # warm-up: the compiles, the argmax kept
    return {
        **recipe,
        "step_ms": round(step_s * 1e3, 1),
        "tokens_per_s": round(args.batch * args.seq / step_s),
    }


def measure(trainer: Trainer, batches: list[Batch], warmup: int) -> dict[str, Any]:
    """Step time and real (unpadded) tokens/s of the batches after the first `warmup`, each run once untimed
    first: FlexAttention builds its kernels per padded length, which a run pays in its first epoch only
    (timing those builds in the unpacked steps read 2.5x where the steady state is 0.98x)."""
    for i, batch in enumerate(batches):
        trainer.step(batch, i)
    _sync(trainer.device)
    started = time.perf_counter()
    for i, batch in enumerate(batches[warmup:]):
        trainer.step(batch, warmup + i)
    _sync(trainer.device)
    elapsed, timed = time.perf_counter() - started, batches[warmup:]
    return {
        "step_ms": round(elapsed / len(timed) * 1e3, 1),
        "tokens_per_s": round(sum(batch.tokens for batch in timed) / elapsed),
    }


def time_target_head(trainer: Trainer, batch: Batch, repeats: int, *, full: bool = True) -> float:
    """The head's time a step: the full vocab (a sample's first epoch) or the draft rows (later epochs)."""
    last = batch.hidden[:, :, 3]

    def head() -> None:
        if full:
            trainer.head.distribution(last, trainer.draft_ids)
        else:
            trainer.head.draft_distribution(last, trainer.draft_rows)

    head()
    _sync(trainer.device)
    started = time.perf_counter()
    for _ in range(repeats):
        head()
    _sync(trainer.device)
    return (time.perf_counter() - started) / repeats


# kernel or op name -> kind, first match wins (CUDA kernel names on a GPU, aten op names on a CPU)
KERNEL_KINDS = (
    ("attention", re.compile(r"flex|attention|attn|fmha|flash|sdpa", re.I)),
    ("loss", re.compile(r"softmax|cross_entropy|nll|logsumexp", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("matmul", re.compile(r"gemm|matmul|\b(add|b)?mm\b|cutlass|xmma|nvjet|aten::linear", re.I)),
    ("norm", re.compile(r"norm", re.I)),
)


def timed_rows(events: Iterable[Any], cuda: bool, steps: int) -> list[tuple[str, float]]:
    """(name, ms a step) of each profiled row whose time is counted once: kernels on CUDA, ops' self time on
    a CPU."""
    from torch.autograd import DeviceType

    timed = []
    for event in events:
        # On CUDA only the kernels' own rows: an op's row carries the kernel time of the kernels it
        # launched too, and counting both doubles the total. A record_function range has a device row of
        # its own as well (`Optimizer.step#AdamW.step`, 3.4 ms a step over the 3.4 ms fused AdamW kernel it
        # spans on an H200): not a kernel either.
        if cuda and (event.device_type == DeviceType.CPU or getattr(event, "is_user_annotation", False)):
            continue
        self_us = event.self_device_time_total if cuda else event.self_cpu_time_total
        if self_us > 0:
            timed.append((event.key, self_us / steps / 1e3))
    return timed


def profile_steps(trainer: Trainer, batch: Batch, start: int, steps: int) -> dict[str, Any]:
    """Kernel time of `steps` steps by kind of kernel and the top kernels, per step (CPU op time on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = trainer.device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        for i in range(steps):
            trainer.step(batch, start + i)
        _sync(trainer.device)
    timed = timed_rows(prof.key_averages(), cuda, steps)
    total = sum(ms for _, ms in timed) or 1.0
    kinds: dict[str, float] = {}
    by_kind: dict[str, list[tuple[str, float]]] = {}
    for name, ms in timed:
        kind = next((k for k, pattern in KERNEL_KINDS if pattern.search(name)), "other")
        kinds[kind] = kinds.get(kind, 0.0) + ms
        by_kind.setdefault(kind, []).append((name, ms))

    def rows(items: list[tuple[str, float]], n: int) -> list[dict[str, Any]]:
        ranked = sorted(items, key=lambda item: -item[1])[:n]
        return [
            {"name": name[:120], "ms_per_step": round(ms, 3), "share": round(ms / total, 3)}
            for name, ms in ranked
        ]

    return {
        "clock": "device (CUDA kernels)" if cuda else "cpu (aten ops, self time)",
        "ms_per_step": round(total, 2),
        "share_by_kind": {k: round(ms / total, 3) for k, ms in sorted(kinds.items(), key=lambda kv: -kv[1])},
        "top": rows(timed, 12),
        # each kind's largest kernels: the top 12 are all GEMMs, which leave a 12.7 % "other" unnamed
        "top_by_kind": {kind: rows(items, 6) for kind, items in by_kind.items() if kind != "matmul"},
    }


def run_yardstick(path: Path, batch: int, tokens_per_s: float) -> dict[str, Any]:
    """The yardstick script in a child process (after eyas's steps, on the same GPU), its JSON, and eyas's
    tokens/s over its compiled figure."""
    done = subprocess.run(
        [sys.executable, str(path), str(batch)], capture_output=True, text=True, timeout=900, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {
            "path": str(path),
            "error": (done.stderr or done.stdout)[-2000:],
            "returncode": done.returncode,
        }
    measured = json.loads(lines[-1])
    compiled = measured.get("compiled", {}).get("tokens_per_s")
    ratio = round(tokens_per_s / compiled, 3) if compiled else None
    return {"path": str(path), "result": measured, "eyas_over_compiled_yardstick": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="tiny shape on CPU, float32")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--ttt", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--attention", choices=["auto", "dense", "flex"], default="auto")
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile the drafter (the stage's cuda default)"
    )
    parser.add_argument(
        "--pack", action="store_true", help="also measure packed against unpacked batches of varied lengths"
    )
    parser.add_argument("--profile", action="store_true", help="also profile --steps steps by kernel kind")
    parser.add_argument("--yardstick", type=Path, help="run this yardstick script after, in the same command")
    parser.add_argument(
        "--stage-recipe",
        action="store_true",
        help="also time a step with the train stage's default recipe (norm_output, frozen lm_head)",
    )
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.small
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    shape = EIGHT_B if not args.small else SMALL
    if args.small:
        torch.set_num_threads(1)  # shared CPU boxes: intra-op threads spin against each other
        args.seq, args.batch, args.steps, args.warmup = min(args.seq, 256), 1, 3, 1
    peak = matmul_peak_tflops(device, dtype, 8192 if cuda else 1024, 50 if cuda else 5)
    trainer = build(shape, args, device, dtype)
    batch = synthetic_batch(shape, args, device)
    # A sample's first epoch runs the full-vocab head; later ones read its argmax (argmax_cache.py). The
    # batch repeats, so a cache that keeps nothing times the first and the real one, after a step, the rest.
    trainer.argmax_cache = ArgmaxCache(budget_bytes=0)
    first_epoch_s = time_steps(trainer, batch, args.warmup, args.steps)
    trainer.argmax_cache = ArgmaxCache()
    step_s = time_steps(trainer, batch, 1, args.steps)
    head_s = time_target_head(trainer, batch, 5)
    draft_head_s = time_target_head(trainer, batch, 5, full=False)
    tokens = args.batch * args.seq
    flops = model_flops_per_token(shape, args.seq, args.ttt) * tokens
    result = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "shape": shape,
        "batch": args.batch,
        "seq": args.seq,
        "ttt": args.ttt,
        "attention": args.attention,
        "compiled": args.compile,
        "step_ms": round(step_s * 1e3, 1),
        "tokens_per_s": round(tokens / step_s),
        "model_tflops": round(flops / step_s / 1e12, 4),
        "matmul_peak_tflops": round(peak, 3),
        "mfu": round(flops / step_s / 1e12 / peak, 3),
        "first_epoch_step_ms": round(first_epoch_s * 1e3, 1),
        "first_epoch_tokens_per_s": round(tokens / first_epoch_s),
        "target_head_ms": round(head_s * 1e3, 1),
        "target_head_share_first_epoch": round(head_s / first_epoch_s, 3),
        "target_head_draft_rows_ms": round(draft_head_s * 1e3, 1),
        "target_head_share": round(draft_head_s / step_s, 3),
    }
    if args.profile:
        result["profile"] = profile_steps(trainer, batch, args.warmup + args.steps, args.steps)
    if args.pack:
        result["pack"] = pack_comparison(trainer, shape, args, device)
    if cuda:
        result["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
    if args.stage_recipe:
        del trainer, batch  # one 8B-shaped drafter and its optimizer on the GPU at a time
        result["stage_recipe"] = stage_recipe_steps(shape, args, device, dtype)
    if args.yardstick is not None:
        result["yardstick"] = run_yardstick(args.yardstick, args.batch, result["tokens_per_s"])
        if ratio := result["yardstick"].get("eyas_over_compiled_yardstick"):
            first = ratio * result["first_epoch_tokens_per_s"] / result["tokens_per_s"]
            result["yardstick"]["first_epoch_over_compiled_yardstick"] = round(first, 3)
            if recipe := result.get("stage_recipe"):
                recipe["over_compiled_yardstick"] = round(
                    ratio * recipe["tokens_per_s"] / result["tokens_per_s"], 3
                )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
