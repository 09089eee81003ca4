"""Building blocks of the EAGLE-3 drafter, with SGLang's `LlamaForCausalLMEagle3` semantics.

Parameter names mirror SGLang's checkpoint keys (`midlayer.self_attn.q_proj`, `midlayer.hidden_norm`,
...) so a state dict of these modules *is* the serving checkpoint. Numerics follow SGLang's forward
(`sglang/srt/models/llama_eagle3.py`): the residual is the un-normed hidden state ("norm after residual"),
q/k/v read `cat([input_layernorm(embeds), hidden_norm(hidden)])` (2H wide), rope is NeoX-style at the caller's
positions, and logits are `lm_head(norm(h))` while the pre-norm `h` is what the next draft step reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from drafting.ml import _attention


class RMSNorm(nn.Module):
    """RMSNorm computed in float32 and cast back, like SGLang's and HF's Llama norms."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps)
        return normed.to(x.dtype)


class Rotary(nn.Module):
    """Rope cos/sin at arbitrary positions; frequencies come from transformers' rope registry.

    Reusing transformers' initialisers keeps `rope_type` variants (llama3, yarn, linear, ...) identical
    to what the target and SGLang compute for the same config. The frequencies are deliberately not a buffer:
    `model.to(torch.bfloat16)` would round them and shift every angle.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hf_rotary = LlamaRotaryEmbedding(LlamaConfig.from_dict(dict(config)))
        self._inv_freq_cpu = hf_rotary.inv_freq.detach().to(torch.float32).clone()
        self._inv_freq_on: dict[torch.device, torch.Tensor] = {}
        self.attention_scaling = float(hf_rotary.attention_scaling)

    def prepare(self, device: torch.device) -> None:
        """Fills the per-device cache before torch.compile traces: filled during a trace, it changes a
        guard, and the next step recompiles the whole unroll."""
        self._inv_freq(device)

    def _inv_freq(self, device: torch.device) -> torch.Tensor:
        if device not in self._inv_freq_on:
            self._inv_freq_on[device] = self._inv_freq_cpu.to(device)
        return self._inv_freq_on[device]

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape [B, 1, S, head_dim] for positions [B, S]."""
        freqs = positions[..., None].float() * self._inv_freq(positions.device)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos = (angles.cos() * self.attention_scaling).to(dtype)
        sin = (angles.sin() * self.attention_scaling).to(dtype)
        return cos[:, None], sin[:, None]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Llama attention whose q/k/v read the 2H-wide `[embeds, hidden]` input."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden = int(config["hidden_size"])
        self.num_heads = int(config["num_attention_heads"])
        self.num_kv_heads = int(config.get("num_key_value_heads") or self.num_heads)
        self.head_dim = int(config.get("head_dim") or hidden // self.num_heads)
        self.q_proj = nn.Linear(2 * hidden, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)

    def fused_weight(self) -> torch.Tensor:
        """q, k and v stacked: one wide GEMM instead of three narrow ones."""
        return torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])

    def project_qkv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, qkv_weight: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, heads, S, d] and k, v [B, kv_heads, S, d], rope applied to q and k."""
        batch, seq, _ = x.shape
        qkv = F.linear(x, self.fused_weight() if qkv_weight is None else qkv_weight)
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def output(self, attended: torch.Tensor) -> torch.Tensor:
        batch, _, seq, _ = attended.shape
        out: torch.Tensor = self.o_proj(
            attended.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)
        )
        return out


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def fused_weight(self) -> torch.Tensor:
        return torch.cat([self.gate_proj.weight, self.up_proj.weight])

    def forward(self, x: torch.Tensor, gate_up_weight: torch.Tensor | None = None) -> torch.Tensor:
        gate_up = F.linear(x, self.fused_weight() if gate_up_weight is None else gate_up_weight)
        gate, up = gate_up.chunk(2, dim=-1)
        out: torch.Tensor = self.down_proj(F.silu(gate) * up)
        return out


@dataclass(frozen=True)
class FusedWeights:
    qkv: torch.Tensor
    gate_up: torch.Tensor


class DecoderLayer(nn.Module):
    """SGLang's EAGLE-3 input layer (`midlayer`): one Llama block over `[embeds, hidden]`."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden, eps = int(config["hidden_size"]), float(config.get("rms_norm_eps", 1e-6))
        self.input_layernorm = RMSNorm(hidden, eps)
        self.hidden_norm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.self_attn = Attention(config)
        self.mlp = MLP(hidden, int(config["intermediate_size"]))

    def attention_input(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)

    def fused_weights(self, dtype: torch.dtype | None) -> FusedWeights:
        """The stacked qkv and gate/up weights, built once per unroll rather than once per TTT step.

        Under autocast they are cast here too: autocast caches casts of parameters, but not of these
        derived tensors, so each step would otherwise re-read and re-cast ~0.7 GB for an 8B-sized drafter.
        """
        qkv, gate_up = self.self_attn.fused_weight(), self.mlp.fused_weight()
        if dtype is not None:
            qkv, gate_up = qkv.to(dtype), gate_up.to(dtype)
        return FusedWeights(qkv, gate_up)

    def finish(
        self, hidden: torch.Tensor, attended: torch.Tensor, weights: FusedWeights | None = None
    ) -> torch.Tensor:
        """Residual adds around attention and MLP; returns the pre-norm output."""
        hidden = hidden + self.self_attn.output(attended)
        gate_up = weights.gate_up if weights is not None else None
        mlp_out: torch.Tensor = self.mlp(self.post_attention_layernorm(hidden), gate_up)
        return hidden + mlp_out

    def causal(
        self, embeds: torch.Tensor, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One causal pass; returns (pre-norm output, rope'd keys, values) so TTT can attend to them later."""
        q, k, v = self.self_attn.project_qkv(self.attention_input(embeds, hidden), cos, sin)
        attended = _attention.causal(q, k, v)
        return self.finish(hidden, attended), k, v
