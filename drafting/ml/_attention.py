"""Attention kernels of the drafter: plain causal, and the training-time-test (TTT) pattern.

TTT step k (k = 0..K-1) runs the decoder layer again on its own previous output. Its query at sequence
position j (rope position j+k) attends to

* the step-0 keys at positions 0..j (causal: the context the target's features describe), and
* the keys that steps 1..k produced at the same position j (rope positions j+1..j+k),

which is what SGLang's drafter sees at decode step k: the prefix KV cache plus the KV of the tokens
it drafted so far. The "dense" kernel materialises the scores (fine on CPU and for tiny shapes); the
"flex" kernel expresses the same pattern as a block-sparse FlexAttention mask over the concatenated keys,
which is what makes the unroll affordable at seq 2048+ on a GPU. Both give the same result
(tests/ml/test_drafter.py checks it).

Packed rows (drafting/ml/packing.py) pass `segments` [B, S], the sample each position belongs to: the
step-0 keys are then attended only within the query's own sample (block-diagonal causal), in both kernels
and at step 0 too. Without `segments` nothing changes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from drafting.ml._compiled import CompiledOnCuda

AttentionBackend = Literal["auto", "dense", "flex"]


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal GQA attention, q [B, h, S, d], k/v [B, kv, S, d] -> [B, h, S, d]."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def ttt(
    q: torch.Tensor,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    backend: AttentionBackend = "auto",
    segments: torch.Tensor | None = None,
) -> torch.Tensor:
    """TTT attention of step len(keys)-1; keys[0]/values[0] are the step-0 (causal) ones. With `segments`
    (packed rows) a query sees step-0 keys of its own sample only."""
    if backend == "auto":
        backend = "flex" if q.is_cuda else "dense"
    if backend == "flex" and (len(keys) > 1 or segments is not None):
        return _ttt_flex(q, keys, values, segments)
    if len(keys) == 1:
        return _causal_within(q, keys[0], values[0], segments)
    return _ttt_dense(q, keys, values, segments)


def _causal_within(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: torch.Tensor | None
) -> torch.Tensor:
    if segments is None:
        return causal(q, k, v)
    allowed = _prefix_allowed(segments)[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=q.shape[1] != k.shape[1])


def _prefix_allowed(segments: torch.Tensor) -> torch.Tensor:
    """[B, S, S]: query i may attend step-0 key j (j <= i, in the same sample)."""
    seq = segments.shape[1]
    causal_mask = torch.ones(seq, seq, dtype=torch.bool, device=segments.device).tril()
    return causal_mask & (segments[:, :, None] == segments[:, None, :])


def _expand_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _ttt_dense(
    q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], segments: torch.Tensor | None
) -> torch.Tensor:
    groups = q.shape[1] // keys[0].shape[1]
    seq, scale = q.shape[2], q.shape[-1] ** -0.5
    prefix_scores = (q @ _expand_kv(keys[0], groups).transpose(-1, -2)).float() * scale
    if segments is None:
        hidden_keys = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    else:
        hidden_keys = ~_prefix_allowed(segments)[:, None]
    prefix_scores = prefix_scores.masked_fill(hidden_keys, float("-inf"))
    own_scores = [(q * _expand_kv(k, groups)).sum(-1).float() * scale for k in keys[1:]]
    probs = torch.cat([prefix_scores, torch.stack(own_scores, dim=-1)], dim=-1).softmax(dim=-1).to(q.dtype)
    out = probs[..., :seq] @ _expand_kv(values[0], groups)
    for step, value in enumerate(values[1:]):
        out = out + probs[..., seq + step, None] * _expand_kv(value, groups)
    return out


def _ttt_flex(
    q: torch.Tensor,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    segments: torch.Tensor | None = None,
) -> torch.Tensor:
    seq = q.shape[2]
    if segments is None:
        block_mask = _block_mask(seq, len(keys), q.device)
    else:
        block_mask = _packed_block_mask(segments, len(keys))
    out = _flex_attention(
        q,
        torch.cat(keys, dim=2),
        torch.cat(values, dim=2),
        block_mask=block_mask,
        enable_gqa=q.shape[1] != keys[0].shape[1],
    )
    assert isinstance(out, torch.Tensor)
    return out


def _ttt_mask_mod(seq: int) -> Callable[[Any, Any, Any, Any], Any]:
    def mask_mod(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:  # noqa: ARG001 - flex_attention's mask_mod signature
        prefix = (kv_idx < seq) & (kv_idx <= q_idx)
        own_position = (kv_idx >= seq) & (kv_idx % seq == q_idx)
        return prefix | own_position

    return mask_mod


def _packed_mask_mod(segments: torch.Tensor) -> Callable[[Any, Any, Any, Any], Any]:
    seq = segments.shape[1]

    def mask_mod(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:  # noqa: ARG001 - flex_attention's mask_mod signature
        same_sample = segments[batch, q_idx] == segments[batch, kv_idx % seq]
        prefix = (kv_idx < seq) & (kv_idx <= q_idx) & same_sample
        own_position = (kv_idx >= seq) & (kv_idx % seq == q_idx)
        return prefix | own_position

    return mask_mod


@torch.compiler.disable  # type: ignore[untyped-decorator]  # torch leaves the decorator untyped
def _packed_block_mask(segments: torch.Tensor, steps: int) -> Any:
    """Packed rows differ batch to batch: their mask is built per call (outside any compiled graph)."""
    batch, seq = segments.shape
    return create_block_mask(
        _packed_mask_mod(segments), batch, None, seq, steps * seq, device=segments.device
    )


# Under torch.compile of the whole unroll, dynamo traces through the cache below (and says so, once per run);
# the mask is a pure function of its arguments, so tracing it is exact.
warnings.filterwarnings("ignore", message="Dynamo detected a call to a `functools.lru_cache`-wrapped")


@lru_cache(maxsize=64)
def _block_mask(seq: int, steps: int, device: torch.device) -> Any:
    """The same mask serves every batch of this length; rebuilding it per call would waste a
    launch storm per step."""
    return create_block_mask(_ttt_mask_mod(seq), None, None, seq, steps * seq, device=device)


# Compiled, FlexAttention is a fused block-sparse kernel; eager, it materialises the scores (CPU tests only).
_flex_attention = CompiledOnCuda(flex_attention)
