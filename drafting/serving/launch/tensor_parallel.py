"""tp_size against the attention heads of the target and the draft, by SGLang's own rule.

SGLang's attention layers split the heads across the tensor-parallel ranks and assert (a bare AssertionError
in the scheduler, after the queue wait and the weight download):

    assert self.total_num_heads % tp_size == 0
    if self.total_num_kv_heads >= tp_size:
        assert self.total_num_kv_heads % tp_size == 0     # partition the KV heads
    else:
        assert tp_size % self.total_num_kv_heads == 0     # replicate the KV heads

(`LlamaAttention.__init__` in sglang/srt/models/llama.py: L148-158 of the 0.5.14 wheel, the GPU host's
version, and L183-193 of 0.5.23, the venv's, identical; `QKVParallelLinear` in layers/linear.py divides the
same way, and the other model files repeat these lines). The EAGLE-3 draft (`llama_eagle3.py`) builds its
decoder layer from that class and runs with the target's tp_size, so the draft's heads are held to the same
rule. The KV heads are `num_key_value_heads`, else `num_attention_heads` (transformers' LlamaConfig default;
ModelConfig.get_total_num_kv_heads falls back the same way).
"""

from __future__ import annotations

from typing import Any

from drafting.findings import Finding, error
from drafting.serving.launch.model_configs import text_config

MAX_TP_SIZE = 64  # LaunchParams.tp_size's bound


def attention_heads(config: dict[str, Any]) -> tuple[int, int] | None:
    """(attention heads, KV heads) of a config, or None when it does not say."""
    text = text_config(config)
    heads, kv_heads = (
        _positive_int(text.get("num_attention_heads")),
        _positive_int(text.get("num_key_value_heads")),
    )
    if heads is None:
        return None
    return heads, kv_heads or heads


def tp_fits(tp_size: int, heads: int, kv_heads: int) -> bool:
    """SGLang's assertions, exactly (see the module docstring)."""
    if heads % tp_size != 0:
        return False
    if kv_heads >= tp_size:
        return kv_heads % tp_size == 0
    return tp_size % kv_heads == 0


def valid_tp_sizes(*shapes: tuple[int, int], limit: int = MAX_TP_SIZE) -> list[int]:
    return [tp for tp in range(1, limit + 1) if all(tp_fits(tp, h, kv) for h, kv in shapes)]


def check_tp_size(
    tp_size: int, target_config: dict[str, Any] | None, draft_config: dict[str, Any] | None
) -> list[Finding]:
    """An error when tp_size does not split the target's (or the draft's) heads the way SGLang requires."""
    named = [("target", target_config), ("draft", draft_config)]
    shapes = {label: attention_heads(config) for label, config in named if config is not None}
    known = {label: shape for label, shape in shapes.items() if shape is not None}
    broken = {label: shape for label, shape in known.items() if not tp_fits(tp_size, *shape)}
    if not broken:
        return []
    described = "; ".join(
        f"the {label} has {heads} attention heads and {kv} KV heads" for label, (heads, kv) in broken.items()
    )
    valid = valid_tp_sizes(*known.values())
    message = (
        f"tp_size {tp_size} does not fit: {described}. SGLang needs attention heads % tp_size == 0, and "
        "KV heads % tp_size == 0 (or tp_size % KV heads == 0 when tp_size is larger: the KV heads are "
        "replicated); it fails with a bare AssertionError while building the model"
    )
    return [error("TP_SIZE_HEADS_MISMATCH", message, f"use tp_size {_listed(valid)}")]


def _listed(sizes: list[int]) -> str:
    if not sizes:
        return "1"
    if len(sizes) == 1:
        return str(sizes[0])
    return ", ".join(map(str, sizes[:-1])) + f" or {sizes[-1]}"


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
