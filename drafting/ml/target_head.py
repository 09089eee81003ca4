"""The frozen parts of the target the trainer needs: the input embedding (the drafter's input), and the final
norm and head that turn the stored last hidden states into the target's next-token distribution.

The distribution comes from the model's own code, never a re-implementation: the text model's class
(drafting/ml/text_model.py) is built on the meta device, its decoder's final norm module and its head are
the only parts given weights, and the logits come out of the class's own forward after the decoder, so
Gemma's `(1 + w)` norm, a final-logit softcap, a tied head and a wrapper's tensor names are right by
construction. Only the embedding, final norm and head tensors are read from the checkpoint (through the
shard index when there is one): training a drafter for a 1T target does not load it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from drafting.ml.text_model import (
    TargetModelError,
    TextModelSpec,
    head_names,
    meta_model,
    read_tensor,
    text_config_object,
    text_model_spec,
    weight_files,
)

DISTRIBUTION_CHUNK = 2048  # positions per full-vocab matmul: bounds the [chunk, vocab] logits in memory

TargetWeightsError = TargetModelError  # the name train and the tests catch
Logits = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def plain_logits(normed: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A bare linear head: normed [n, T] @ rows [v, T].T (for heads from loose tensors, and for a model whose
    own forward was checked to be exactly this: ModelLogits.is_plain_linear)."""
    return F.linear(normed, rows)


@dataclass
class TargetHead:
    embed: torch.Tensor  # [V, T]
    lm_head: torch.Tensor  # [V, T]
    final_norm: nn.Module  # the target's own final norm (float32 weights, applied to float32 states)
    logits: Logits = field(default=plain_logits)  # (normed [n, T], head rows [v, T]) -> [n, v]

    def to(self, device: torch.device, dtype: torch.dtype) -> TargetHead:
        norm = copy.deepcopy(self.final_norm).to(device=device, dtype=torch.float32)
        return TargetHead(self.embed.to(device, dtype), self.lm_head.to(device, dtype), norm, self.logits)

    def _normed(self, chunk: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        normed: torch.Tensor = self.final_norm(chunk.float())
        return normed.to(dtype)

    @torch.no_grad()
    def distribution(self, last: torch.Tensor, draft_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """From pre-norm last states [B, S, T]: (probabilities over the draft vocab [B, S, Vd] in the head's
        dtype, the target's full-vocab argmax [B, S])."""
        flat = last.reshape(-1, last.shape[-1])
        probs, argmax = [], []
        for chunk in flat.split(DISTRIBUTION_CHUNK):
            logits = self.logits(self._normed(chunk, self.lm_head.dtype), self.lm_head)
            argmax.append(logits.argmax(dim=-1))
            probs.append(logits[:, draft_ids].float().softmax(dim=-1).to(self.lm_head.dtype))
        shape = last.shape[:-1]
        return torch.cat(probs).view(*shape, -1), torch.cat(argmax).view(shape)

    @torch.no_grad()
    def draft_distribution(self, last: torch.Tensor, draft_rows: torch.Tensor) -> torch.Tensor:
        """`distribution`'s probabilities alone, from the draft vocab's rows of lm_head (`draft_rows`
        [Vd, T]): the same logits, without the full-vocab matmul the argmax needs (argmax_cache.py). The
        model's logit transforms (a softcap, a scale) act on each logit alone, so they commute with taking
        rows."""
        flat = last.reshape(-1, last.shape[-1])
        probs = []
        for chunk in flat.split(DISTRIBUTION_CHUNK):
            logits = self.logits(self._normed(chunk, draft_rows.dtype), draft_rows)
            probs.append(logits.float().softmax(dim=-1).to(draft_rows.dtype))
        return torch.cat(probs).view(*last.shape[:-1], -1)


class _DecoderOutput:
    """What a decoder returns, as the forward after it reads it: the last states, and None for the rest
    (router logits of a MoE, a cache) that no forward reads unless it was asked for them."""

    def __init__(self, states: torch.Tensor) -> None:
        self.last_hidden_state = states

    def __getattr__(self, name: str) -> None:
        return None

    def __getitem__(self, index: int) -> torch.Tensor:
        if index != 0:
            raise IndexError(index)
        return self.last_hidden_state


class _Normed(nn.Module):
    """Stands in for the decoder inside the model's own forward: hands back the states it is given (already
    through the final norm), so the forward's code after the decoder (the head, a softcap) runs on them."""

    def forward(self, *args: Any, inputs_embeds: torch.Tensor, **kwargs: Any) -> _DecoderOutput:  # noqa: ARG002 - the decoder's call signature
        return _DecoderOutput(inputs_embeds)


class ModelLogits:
    """The logits of the text model's own forward for normed states and a set of head rows: the model on
    the meta device with its decoder swapped for `_Normed`, called with the rows as its head's weight."""

    def __init__(self, model: nn.Module, decoder_attr: str, head_weight: str) -> None:
        setattr(model, decoder_attr, _Normed())
        leftover = [name for name, _ in model.named_parameters() if name != head_weight]
        if leftover:
            raise TargetModelError(
                f"{type(model).__name__} holds weights outside its decoder and head "
                f"({', '.join(leftover[:3])}); eyas cannot run its head alone"
            )
        self._model, self._head_weight = model.eval(), head_weight

    def __call__(self, normed: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(
            self._model,
            {self._head_weight: rows},
            args=(),
            kwargs={"inputs_embeds": normed[None], "use_cache": False},
        )
        logits: torch.Tensor = out.logits[0]
        return logits

    def is_plain_linear(self, hidden_size: int) -> bool:
        """Whether the forward after the decoder is the head's matmul alone, checked on random states and
        rows (bit for bit): then the trainer calls the matmul itself and skips the forward's Python, about
        a quarter of a millisecond per chunk. A softcap or a logit scale shows, and keeps the forward."""
        generator = torch.Generator().manual_seed(0)
        states = torch.randn(8, hidden_size, generator=generator)
        rows = torch.randn(16, hidden_size, generator=generator)
        with torch.no_grad():
            return bool(torch.equal(self(states, rows), plain_logits(states, rows)))


def _final_norm(model: nn.Module, name: str, weight: torch.Tensor) -> nn.Module:
    norm = copy.deepcopy(model.get_submodule(name)).to_empty(device="cpu").float()
    norm.load_state_dict({"weight": weight.float()}, strict=True)
    return norm.eval().requires_grad_(False)


def read_final_norm(folder: Path, spec: TextModelSpec | None = None) -> nn.Module:
    """The target's own final norm module with its weight (no embedding or lm_head read)."""
    spec = spec or text_model_spec(folder)
    model = meta_model(spec)
    name = head_names(model).norm
    return _final_norm(
        model, name, read_tensor(weight_files(spec.folder), spec.checkpoint_name(f"{name}.weight"))
    )


def stored_head_names(folder: Path, spec: TextModelSpec | None = None) -> dict[str, str]:
    """The checkpoint's names of the tensors the trainer reads as `embed`, `norm` and `lm_head` (a tied
    target's lm_head is its input embedding)."""
    spec = spec or text_model_spec(folder)
    names = head_names(meta_model(spec))
    embed = spec.checkpoint_name(names.embed)
    return {
        "embed": embed,
        "norm": spec.checkpoint_name(f"{names.norm}.weight"),
        "lm_head": embed if names.tied else spec.checkpoint_name(names.lm_head),
    }


def load_target_head(folder: Path, *, trust_remote_code: bool = False) -> TargetHead:
    spec = text_model_spec(folder, trust_remote_code=trust_remote_code)
    model = meta_model(spec)
    names = head_names(model)
    files = weight_files(spec.folder)
    embed = read_tensor(files, spec.checkpoint_name(names.embed))
    lm_head = embed if names.tied else _head_tensor(files, spec, names.lm_head)
    norm = _final_norm(model, names.norm, read_tensor(files, spec.checkpoint_name(f"{names.norm}.weight")))
    config = text_config_object(spec)
    expected = (int(config.vocab_size), int(config.hidden_size))
    for what, tensor in (("embed", embed), ("lm_head", lm_head)):
        if tuple(tensor.shape) != expected:
            raise TargetModelError(f"target {what} is {tuple(tensor.shape)}, config says {expected}")
    model_logits = ModelLogits(model, names.embed.split(".", 1)[0], names.lm_head)
    logits = plain_logits if model_logits.is_plain_linear(expected[1]) else model_logits
    return TargetHead(embed, lm_head, norm, logits)


def _head_tensor(files: dict[str, Path], spec: TextModelSpec, name: str) -> torch.Tensor:
    stored = spec.checkpoint_name(name)
    if stored not in files:
        raise TargetModelError(
            f"the target has no lm_head tensor ({stored}) and its config does not tie it to the embedding"
        )
    return read_tensor(files, stored)
