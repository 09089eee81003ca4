"""The yardstick for eyas's training step: the least work an EAGLE-3 drafter's training step does, written
as plain PyTorch and timed eager and under torch.compile. Prints JSON.

At a drafter shape (bench/_drafter_shapes.py), batch, sequence length and TTT steps: the fc that folds the
target's three aux states into the hidden size, then one decoder layer run `--ttt` times, its q/k/v reading
the token embedding beside the hidden state (2H wide), one causal attention a pass over that pass's own keys,
the final norm and the draft vocabulary's lm_head, a cross-entropy on hard labels at every pass weighted by
0.8 to the pass's number, then backward and AdamW. eyas's step does more than this (soft targets from the
target's head, attention over the earlier passes' keys, accuracy counts), so its tokens/s over this one's is
the share of the plain work it reaches. `python -m bench.train_step --yardstick` runs this in a child
process after its own steps, at the same shape, and reports that share.

    python -m bench.train_yardstick [--batch 2] [--seq 2048] [--ttt 7]     # GPU, bf16, eager and compiled
    python -m bench.train_yardstick --small                               # CPU, float32, eager
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from bench import _cli as cli
from bench._drafter_shapes import SHAPES, matmul_peak_tflops, model_flops_per_token, sync

STEP_DECAY = 0.8


class PlainDrafter(torch.nn.Module):
    """fc, one Llama decoder layer with a 2H-wide attention input, final norm and lm_head."""

    def __init__(self, shape: dict[str, int], device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        h, inter, vocab = shape["hidden_size"], shape["intermediate_size"], shape["draft_vocab_size"]
        heads, kv_heads = shape["num_attention_heads"], shape["num_key_value_heads"]
        self.head_dim = h // heads

        def linear(inputs: int, outputs: int) -> torch.nn.Linear:
            return torch.nn.Linear(inputs, outputs, bias=False, device=device, dtype=dtype)

        def norm() -> torch.nn.RMSNorm:
            return torch.nn.RMSNorm(h, eps=1e-5, device=device, dtype=dtype)

        self.fc = linear(3 * h, h)
        self.q, self.k, self.v = (linear(2 * h, n * self.head_dim) for n in (heads, kv_heads, kv_heads))
        self.o = linear(heads * self.head_dim, h)
        self.gate, self.up, self.down = linear(h, inter), linear(h, inter), linear(inter, h)
        self.lm_head = linear(h, vocab)
        self.embedding_norm, self.hidden_norm, self.mlp_norm, self.final_norm = (norm() for _ in range(4))

    def layer(self, embedded: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.embedding_norm(embedded), self.hidden_norm(hidden)], dim=-1)
        batch, seq, _ = x.shape

        def heads(projection: torch.nn.Linear) -> torch.Tensor:
            return projection(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)

        attended = F.scaled_dot_product_attention(
            heads(self.q), heads(self.k), heads(self.v), is_causal=True, enable_gqa=True
        )
        hidden = hidden + self.o(attended.transpose(1, 2).reshape(batch, seq, -1))
        normed = self.mlp_norm(hidden)
        return hidden + self.down(F.silu(self.gate(normed)) * self.up(normed))

    def loss(self, aux: torch.Tensor, embedded: torch.Tensor, labels: torch.Tensor, ttt: int) -> torch.Tensor:
        hidden = self.fc(aux)
        total = torch.zeros((), device=aux.device)
        for step in range(ttt):
            hidden = self.layer(embedded, hidden)
            logits = self.lm_head(self.final_norm(hidden)).float()
            total = total + STEP_DECAY**step * F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return total


def make_step(
    model: PlainDrafter, batch: dict[str, torch.Tensor], ttt: int, device: torch.device
) -> Callable[[], None]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

    def step() -> None:
        model.loss(batch["aux"], batch["embedded"], batch["labels"], ttt).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def timed(step: Callable[[], None], device: torch.device, warmup: int, steps: int) -> float:
    """Seconds a step, after `warmup` untimed ones (a compiled step compiles in its first)."""
    for _ in range(warmup):
        step()
    sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return (time.perf_counter() - started) / steps


def measure(args: argparse.Namespace) -> dict[str, Any]:
    cuda = torch.cuda.is_available() and not args.small
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    shape = SHAPES["small" if args.small else args.shape]
    h, b, s = shape["hidden_size"], args.batch, args.seq
    torch.manual_seed(0)
    batch = {
        "aux": torch.randn(b, s, 3 * h, device=device, dtype=dtype),
        "embedded": torch.randn(b, s, h, device=device, dtype=dtype),
        "labels": torch.randint(0, shape["draft_vocab_size"], (b, s), device=device),
    }
    flops = model_flops_per_token(shape, s, args.ttt) * b * s
    peak = matmul_peak_tflops(device, dtype, 8192 if cuda else 1024, 50 if cuda else 5)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "shape": shape,
        "batch": b,
        "seq": s,
        "ttt": args.ttt,
        "matmul_peak_tflops": round(peak, 3),
    }
    variants = ["eager"] if args.eager_only or not cuda else ["eager", "compiled"]
    for variant in variants:
        torch.manual_seed(0)
        step = make_step(PlainDrafter(shape, device, dtype), batch, args.ttt, device)
        seconds = timed(
            torch.compile(step) if variant == "compiled" else step, device, args.warmup, args.steps
        )
        result[variant] = {
            "step_ms": round(seconds * 1e3, 1),
            "tokens_per_s": round(b * s / seconds),
            "tflops": round(flops / seconds / 1e12, 2),
            "mfu": round(flops / seconds / 1e12 / peak, 3),
        }
    if cuda:
        result["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = cli.parser(__doc__)
    parser.add_argument("--small", action="store_true", help="the small shape on the CPU, float32, eager")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--ttt", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--eager-only", action="store_true", help="leave the torch.compile run out")
    args = parser.parse_args(argv)
    if args.small:  # as `bench.train_step --small` runs
        torch.set_num_threads(1)  # shared CPU boxes: intra-op threads spin against each other
        args.seq, args.batch, args.steps, args.warmup = min(args.seq, 256), 1, 3, 1
    return args


def main() -> None:
    print(json.dumps(measure(parse())))


if __name__ == "__main__":
    main()
