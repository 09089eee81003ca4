"""The EAGLE-3 drafter as a torch module in SGLang's native layout, and its stable API.

Stable API (other helpers build on it; keep these signatures):

* ``Eagle3Drafter.from_target_config(target_config: dict, *, draft_vocab_size: int,
  aux_layer_ids: list[int], aux_capture=RESIDUAL_STREAM, sglang_version=0.5.14)`` builds a randomly
  initialised drafter for a target (hidden size, heads, rope, vocab all from the target).
  ``aux_layer_ids`` are **HF ``output_hidden_states`` indices** (default ``[2, N//2, N-3]``, see
  ``default_aux_layers``); config.json stores the ids under which the target's class in that SGLang release
  captures them (index - 1 for most, DeepSeek's own rule for its family: the support matrix) in
  ``eagle_config``, and the layers and capture trained on under ``eyas_aux_capture``.
* ``load_drafter(folder, *, target_embed, device, dtype) -> Eagle3Drafter`` reads ``config.json`` +
  ``model.safetensors`` (the target's embedding matrix is passed in: it is frozen and never saved).
* ``save_drafter(model, folder, *, target_config) -> None`` writes ``config.json`` + ``model.safetensors``
  atomically (the folder is swapped in whole).
* ``drafter.forward_sequence(input_ids [B, n], features [B, n, F], positions=None) -> (logits [B, n, Vd],
  hidden [B, n, H])``: full causal forward without cache. ``features`` are the target's 3 concatenated aux
  states (F = 3T; ``fc`` applied) or hidden states already in drafter space (F = H; ``fc`` skipped, as SGLang
  does) such as the drafter's own previous outputs. The input at position i is
  ``(embed(input_ids[i]), features[i])`` and predicts the token *after* ``input_ids[i]``: feed the
  target state at position i together with token i+1. To mix target context and drafted positions in one
  call, project the target part first (``drafter.project(aux)``) and concatenate along the sequence.
  ``hidden`` is the feature the next draft step reads: the pre-norm output, or the normed one when the
  config sets ``norm_output`` (speculators' default, served by SGLang 0.5.12+: its draft forward returns
  ``hidden_states_to_logits if self.norm_output else hidden_states_to_aux``); logits cover the draft vocab.
* ``drafter.draft_to_target(draft_ids) -> target_ids`` via ``d2t`` (target = draft + d2t[draft]).
* ``aux_hidden_states(target_model, input_ids, ...) -> [B, n, 3T]`` captures the target's aux states at HF
  indices ``[2, N//2, N-3]`` by default (re-exported from ``drafting.ml.capture``).
* ``drafter.forward_ttt(input_ids, features, steps)`` is the training-time-test unroll used by the trainer.

Checkpoint keys (exactly what SGLang's ``LlamaForCausalLMEagle3.load_weights`` maps): ``fc.weight``,
``midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight``,
``midlayer.self_attn.{q,k,v,o}_proj.weight`` (q/k/v input 2H), ``midlayer.mlp.{gate,up,down}_proj.weight``,
``norm.weight``, ``lm_head.weight`` [draft_vocab, H], ``d2t`` (int64). ``embed_tokens`` is not saved: SGLang
overwrites the draft embedding with the target's. ``t2d`` is not saved either: SGLang skips it and it is
``d2t``-derivable (``Eagle3Drafter.t2d``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from drafting.ml import _attention
from drafting.ml._checkpoint import load_drafter, save_drafter
from drafting.ml._config import aux_capture_of, aux_layers_of, default_aux_layers, drafter_config
from drafting.ml._layers import DecoderLayer, RMSNorm, Rotary
from drafting.ml.capture import aux_hidden_states
from drafting.ml.packing import RowLayout
from drafting.sglang_facts import SGLANG_VERSION_ON_GPU_HOST
from drafting.support_matrix import CaptureKind

__all__ = [
    "Eagle3Drafter",
    "aux_hidden_states",
    "default_aux_layers",
    "load_drafter",
    "save_drafter",
]


class Eagle3Drafter(nn.Module):
    """fc (3T -> H), one decoder layer over [embeds, hidden] (2H), norm, lm_head over the draft vocab."""

    d2t: torch.Tensor

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.config = dict(config)
        hidden = int(config["hidden_size"])
        target_hidden = int(config.get("target_hidden_size") or hidden)
        num_aux = len(config.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
        self.embed_tokens = nn.Embedding(int(config["vocab_size"]), hidden)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(num_aux * target_hidden, hidden, bias=False)
        self.midlayer = DecoderLayer(config)
        self.norm = RMSNorm(hidden, float(config.get("rms_norm_eps", 1e-6)))
        self.lm_head = nn.Linear(hidden, int(config["draft_vocab_size"]), bias=False)
        self.register_buffer("d2t", torch.zeros(int(config["draft_vocab_size"]), dtype=torch.int64))
        self.rotary = Rotary(config)
        # No weights of its own, so a loader cannot catch it: a draft trained with it and decoded without
        # it drafts its first token right and the rest wrong (a speculators draft, which carries it, reads
        # 1.55 at depth 5 decoded without it and 1.95 with it)
        self.norm_output = bool(config.get("norm_output", False))

    @classmethod
    def from_target_config(
        cls,
        target_config: dict[str, Any],
        *,
        draft_vocab_size: int,
        aux_layer_ids: list[int],
        norm_output: bool = False,
        aux_capture: CaptureKind = CaptureKind.RESIDUAL_STREAM,
        sglang_version: str = SGLANG_VERSION_ON_GPU_HOST,
    ) -> Eagle3Drafter:
        config = drafter_config(
            target_config,
            draft_vocab_size=draft_vocab_size,
            aux_layer_ids=aux_layer_ids,
            aux_capture=aux_capture,
            sglang_version=sglang_version,
        )
        if norm_output:  # written only when on: a config without it reads as SGLang's default, off
            config["norm_output"] = True
        return cls(config)

    @property
    def hidden_size(self) -> int:
        return int(self.config["hidden_size"])

    @property
    def aux_layers(self) -> list[int]:
        """HF hidden-state indices of the target states this drafter reads."""
        return aux_layers_of(self.config)

    @property
    def aux_capture(self) -> CaptureKind:
        """What those states are (the serving class's capture the drafter was trained on)."""
        return aux_capture_of(self.config)

    @property
    def t2d(self) -> torch.Tensor:
        """Bool mask over the target vocab: which target ids the draft vocab covers."""
        mask = torch.zeros(int(self.config["vocab_size"]), dtype=torch.bool, device=self.d2t.device)
        mask[self.draft_to_target(torch.arange(self.d2t.numel(), device=self.d2t.device))] = True
        return mask

    def set_vocab_mapping(self, d2t: torch.Tensor) -> None:
        if d2t.shape != self.d2t.shape:
            raise ValueError(f"d2t has shape {tuple(d2t.shape)}, expected {tuple(self.d2t.shape)}")
        self.d2t.copy_(d2t.to(torch.int64))

    def set_target_embeddings(self, weight: torch.Tensor) -> None:
        if weight.shape != self.embed_tokens.weight.shape:
            raise ValueError(
                f"target embedding {tuple(weight.shape)} != drafter's {tuple(self.embed_tokens.weight.shape)}"
            )
        with torch.no_grad():
            self.embed_tokens.weight.copy_(weight)

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """Target aux states -> drafter space; already-projected features pass through (SGLang's rule)."""
        if features.shape[-1] == self.hidden_size:
            return features
        projected: torch.Tensor = self.fc(_compute_dtype(features, self.fc.weight))
        return projected

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.lm_head(self.norm(hidden))
        return logits

    def next_features(self, out: torch.Tensor) -> torch.Tensor:
        """What the next draft step reads of a pre-norm output: itself, or normed under `norm_output`."""
        if not self.norm_output:
            return out
        normed: torch.Tensor = self.norm(out)
        return normed

    def _embed(self, input_ids: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        embeds: torch.Tensor = self.embed_tokens(input_ids)
        return embeds.to(like.dtype)

    def forward_sequence(
        self, input_ids: torch.Tensor, features: torch.Tensor, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.project(features)
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        cos, sin = self.rotary(positions, hidden.dtype)
        out, _, _ = self.midlayer.causal(self._embed(input_ids, hidden), hidden, cos, sin)
        return self.logits(out), self.next_features(out)

    def forward(
        self,
        input_ids: torch.Tensor,
        features: torch.Tensor,
        steps: int,
        attention: _attention.AttentionBackend = "auto",
        layout: RowLayout | None = None,
    ) -> list[torch.Tensor]:
        """`forward_ttt`, under the name DDP and torch.compile hook into."""
        return self.forward_ttt(input_ids, features, steps, attention, layout)

    def forward_ttt(
        self,
        input_ids: torch.Tensor,
        features: torch.Tensor,
        steps: int,
        attention: _attention.AttentionBackend = "auto",
        layout: RowLayout | None = None,
    ) -> list[torch.Tensor]:
        """Pre-norm outputs of `steps` TTT passes, each [B, S, H].

        Step k at position j reads token `input_ids[j + k]` (0 past the end) and the step k-1 output at
        j (`next_features` of it), sits at rope position j + k, and predicts the token after
        `input_ids[j + k]`. Step 0 reads `project(features)`.

        With a `layout` (packed rows, drafting/ml/packing.py) every sample runs as if alone: positions count
        from its start, attention stays inside it, and `input_ids[j + k]` reads 0 from the sample's last
        position on (`tokens_after[j] <= k`), where an unpacked row reads its padding.
        """
        hidden = self.project(features)
        positions = self._base_positions(input_ids, layout)
        segments = layout.segments if layout is not None else None
        layer, keys, values, outputs = self.midlayer, [], [], []
        weights = layer.fused_weights(_autocast_dtype(hidden))
        for step in range(steps):
            step_ids = _step_tokens(input_ids, step, layout)
            cos, sin = self.rotary(positions + step, hidden.dtype)
            x = layer.attention_input(self._embed(step_ids, hidden), hidden)
            q, k, v = layer.self_attn.project_qkv(x, cos, sin, weights.qkv)
            keys.append(k)
            values.append(v)
            attended = _attention.ttt(q, keys, values, attention, segments)
            out = layer.finish(hidden, attended, weights)
            outputs.append(out)
            hidden = self.next_features(out)
        return outputs

    @staticmethod
    def _base_positions(input_ids: torch.Tensor, layout: RowLayout | None) -> torch.Tensor:
        if layout is not None:
            return layout.positions
        return torch.arange(input_ids.shape[1], device=input_ids.device)[None]


def _compute_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Match the weights' dtype unless autocast owns the casts (it would cast bf16 features back down)."""
    if torch.is_autocast_enabled(x.device.type):
        return x
    return x.to(weight.dtype)


def _autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    device_type = x.device.type
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


def _step_tokens(ids: torch.Tensor, step: int, layout: RowLayout | None) -> torch.Tensor:
    """The tokens TTT step `step` reads: `ids` shifted left, 0 past the row's (packed: the sample's) end."""
    shifted = _shift_left(ids, step)
    if layout is None:
        return shifted
    return shifted.masked_fill(layout.tokens_after <= step, 0)


def _shift_left(ids: torch.Tensor, by: int) -> torch.Tensor:
    if by == 0:
        return ids
    return torch.cat([ids[:, by:], ids.new_zeros(ids.shape[0], min(by, ids.shape[1]))], dim=1)
