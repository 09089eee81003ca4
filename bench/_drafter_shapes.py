"""The drafter shapes the training-step benchmarks run at, the model FLOPs of one step at a shape, and the
matmul peak measured in the benchmark's own process (so a utilisation figure needs no datasheet)."""

from __future__ import annotations

import time
from typing import Any

import torch

# An EAGLE-3 drafter for an 8B Llama-3 target: its hidden and MLP sizes, heads, the target's vocabulary (the
# target head's rows) and a 32k draft vocabulary.
EIGHT_B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
}
# The same layout small enough for a CPU in seconds.
SMALL = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 4096,
    "draft_vocab_size": 1024,
}
SHAPES = {"8b": EIGHT_B, "small": SMALL}


def drafter_config(shape: dict[str, int]) -> dict[str, Any]:
    """The drafter's config.json at `shape`, as eyas's trainer reads it."""
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
    """Forward and backward FLOPs a token of one training step: fc once, then `ttt` passes of the decoder
    layer (q/k/v from the 2H input, o, the MLP, causal attention) and the draft vocabulary's lm_head."""
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


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak_tflops(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    """The rate of square `size` matmuls in `dtype` on `device`, after a warm-up."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    return 2 * size**3 * repeats / (time.perf_counter() - started) / 1e12
