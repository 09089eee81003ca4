"""Where a training step's time goes: torch.profiler over some steps, kernel time a step by kind of kernel
(attention, matmul, loss, optimizer, norm, other) and the largest kernels (bench.train_step --profile)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from bench._drafter_shapes import sync
from drafting.ml.train_data import Batch
from drafting.ml.trainer import Trainer

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
        sync(trainer.device)
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
