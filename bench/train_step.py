"""Training throughput of eyas's EAGLE-3 trainer step, and its model FLOPs utilisation.

Default shape: a drafter for an 8B target (H 4096, intermediate 14,336, 32/8 heads, vocab 128,256, draft vocab
32k), TTT 7, seq 2048, bf16, on one GPU. It runs the real `Trainer.step` (target soft targets from a random
lm_head, the 7-step unroll with the real TTT attention, soft cross-entropy, AdamW) on synthetic batches, and
measures the bf16 matmul peak in the same process, so the MFU does not depend on a datasheet figure.

    python -m bench.train_step [--batch 2] [--seq 2048] [--compile]   # GPU
    python -m bench.train_step --small                                  # CPU, under a minute
    python -m bench.train_step --pack [--compile]                       # + packed vs unpacked, same run
    python -m bench.train_step --compile --profile --stage-recipe --yardstick
        # + where a step's kernel time goes, and the yardstick run after it in the same command

`--pack` adds `pack`: samples of ShareGPT-like lengths (log-normal, median seq/4, cut to seq), batched as the
train stage does (unpacked: `batch` samples padded to the longest, rounded up to 128 on a GPU; packed:
`batch` rows of up to `seq` tokens), and real (unpadded) tokens/s of each over the same number of steps.

`--stage-recipe` adds `stage_recipe`: a step with the train stage's default recipe (`norm_output` on, lm_head
frozen; docs/design/default-training-recipe.md), which skips the head's weight gradient, so it does less work
than the yardstick; the main figures keep the yardstick's work (the head trained).

`--profile` adds `profile`: torch.profiler over `--steps` more steps, kernel time per step by kind of kernel
(attention, matmul, loss, optimizer, norm, other) and the top kernels: what limits the step. `--yardstick`
runs `python -m bench.train_yardstick` (the plain-PyTorch step at the same shape, batch, sequence and TTT
steps) after eyas's steps, in a child process of the same command, and adds its JSON and eyas's tokens/s
over its figure, compiled where it compiled (the goal: ≥ 0.95).

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
import time
from typing import Any

import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from bench import _cli as cli
from bench._drafter_shapes import (
    EIGHT_B,
    SMALL,
    drafter_config,
    matmul_peak_tflops,
    model_flops_per_token,
    sync,
)
from bench._run import python_module, run
from bench._step_profile import profile_steps
from contract.params.train import TrainParams
from drafting.ml.argmax_cache import ArgmaxCache
from drafting.ml.drafter import Eagle3Drafter
from drafting.ml.packing import epoch_packs, packing_report, row_layout
from drafting.ml.target_head import TargetHead
from drafting.ml.train_data import Batch, epoch_batches
from drafting.ml.trainer import OptimSettings, Trainer, make_optimizer


def build(
    shape: dict[str, int],
    args: argparse.Namespace,
    device: torch.device,
    dtype: torch.dtype,
    recipe: dict[str, bool] | None = None,
) -> Trainer:
    """The trainer at `shape`: with the lm_head trained and no norm_output (the yardstick's work), or with
    `recipe`'s `norm_output` and `train_lm_head` as the train stage applies them."""
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
    sync(trainer.device)
    started = time.perf_counter()
    for i in range(steps):
        trainer.step(batch, warmup + i)
    sync(trainer.device)
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
    sync(trainer.device)
    started = time.perf_counter()
    for i, batch in enumerate(batches[warmup:]):
        trainer.step(batch, warmup + i)
    sync(trainer.device)
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
    sync(trainer.device)
    started = time.perf_counter()
    for _ in range(repeats):
        head()
    sync(trainer.device)
    return (time.perf_counter() - started) / repeats


def yardstick_argv(args: argparse.Namespace) -> list[str]:
    """`bench.train_yardstick` at this run's shape, batch, sequence and TTT steps."""
    shape = ["--small"] if args.small else ["--shape", "8b"]
    sizes = ["--batch", str(args.batch), "--seq", str(args.seq), "--ttt", str(args.ttt)]
    return python_module("bench.train_yardstick", *shape, *sizes)


def run_yardstick(argv: list[str], tokens_per_s: float) -> dict[str, Any]:
    """The yardstick in a child process (after eyas's steps, on the same device), its JSON, and eyas's
    tokens/s over its compiled figure, or its eager one where it did not compile (a CPU run)."""
    ran = run(argv, timeout_s=900)
    lines = [line for line in ran.stdout if line.startswith("{")]
    if not ran.ok or not lines:
        return {"argv": argv[1:], "error": ran.tail(40), "returncode": ran.result.exit_code}
    measured = json.loads(lines[-1])
    over = "compiled" if "compiled" in measured else "eager"
    ratio = round(tokens_per_s / measured[over]["tokens_per_s"], 3)
    return {"argv": argv[1:], "result": measured, "over": over, "eyas_over_yardstick": ratio}


def main() -> None:
    parser = cli.parser(__doc__)
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
    parser.add_argument(
        "--yardstick", action="store_true", help="run bench.train_yardstick after, in the same command"
    )
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
    if args.yardstick:
        result["yardstick"] = run_yardstick(yardstick_argv(args), result["tokens_per_s"])
        if ratio := result["yardstick"].get("eyas_over_yardstick"):
            first = ratio * result["first_epoch_tokens_per_s"] / result["tokens_per_s"]
            result["yardstick"]["first_epoch_over_yardstick"] = round(first, 3)
            if recipe := result.get("stage_recipe"):
                recipe["over_yardstick"] = round(ratio * recipe["tokens_per_s"] / result["tokens_per_s"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
