"""Capturing a HF target's hidden states where SGLang's EAGLE-3 capture takes them, as its class does.

HF index i of `output_hidden_states` is the output of decoder layer i-1 (index 0 = the embeddings), which
is the *input* of layer i: what most SGLang targets store for `layers_to_capture` i (the pre-norm residual
stream, `CaptureKind.RESIDUAL_STREAM`). Some classes store another tensor there (the support matrix says
which, per release): Gemma3 in SGLang 0.5.23 stores layer i-1's post-feedforward branch without the
residual (`CaptureKind.BLOCK_BRANCH`), read here from the output of that layer's
`post_feedforward_layernorm`. The last state eyas stores (index N) is the output of the final decoder
layer *before* the final norm, whatever the kind (the trainer applies the frozen norm and lm_head itself).
HF's own `hidden_states[-1]` is post-norm, so this module reads the layers with forward hooks instead, which
also avoids keeping all N+1 states alive.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from drafting.ml._config import default_aux_layers
from drafting.support_matrix.rules import BLOCK_BRANCH_MODULE, CaptureKind


def decoder_of(target_model: nn.Module) -> nn.Module:
    """The decoder stack (no lm_head): running it alone skips the [tokens, vocab] logits."""
    get_decoder = getattr(target_model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else getattr(target_model, "model", target_model)
    if not isinstance(getattr(decoder, "layers", None), nn.ModuleList):
        raise TypeError(f"{type(target_model).__name__} has no `layers` decoder stack eyas can hook")
    assert isinstance(decoder, nn.Module)
    return decoder


def decoder_layers(target_model: nn.Module) -> nn.ModuleList:
    layers = decoder_of(target_model).layers
    assert isinstance(layers, nn.ModuleList)
    return layers


def num_decoder_layers(target_model: nn.Module) -> int:
    return len(decoder_layers(target_model))


@contextmanager
def capture_layers(
    target_model: nn.Module, indices: list[int], kind: CaptureKind = CaptureKind.RESIDUAL_STREAM
) -> Iterator[dict[int, torch.Tensor]]:
    """Hooks that fill `{hf_index: hidden [B, S, T]}` during a forward of the target.

    `kind` says what an index below N names (the serving class's capture); index 0 is the embeddings and
    index N the final pre-norm state for every kind.
    """
    layers = decoder_layers(target_model)
    captured: dict[int, torch.Tensor] = {}
    handles = []
    for index in indices:
        if index == 0:
            handles.append(layers[0].register_forward_pre_hook(_store_input(captured, 0), with_kwargs=True))
        elif kind is CaptureKind.BLOCK_BRANCH and index < len(layers):
            branch = _branch_module(layers[index - 1], index - 1)
            handles.append(branch.register_forward_hook(_store_output(captured, index)))
        else:
            handles.append(layers[index - 1].register_forward_hook(_store_output(captured, index)))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def _branch_module(layer: nn.Module, number: int) -> nn.Module:
    branch = getattr(layer, BLOCK_BRANCH_MODULE, None)
    if not isinstance(branch, nn.Module):
        raise TypeError(
            f"decoder layer {number} ({type(layer).__name__}) has no `{BLOCK_BRANCH_MODULE}`: the serving "
            "class captures the block branch, which eyas reads from that module's output"
        )
    return branch


def _store_output(captured: dict[int, torch.Tensor], index: int) -> Any:
    def hook(module: nn.Module, args: Any, output: Any) -> None:  # noqa: ARG001 - torch's forward-hook signature
        captured[index] = output[0] if isinstance(output, tuple) else output

    return hook


def _store_input(captured: dict[int, torch.Tensor], index: int) -> Any:
    def hook(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:  # noqa: ARG001 - torch's forward-hook signature
        captured[index] = args[0] if args else kwargs["hidden_states"]

    return hook


def capture_hidden_states(
    target_model: nn.Module,
    input_ids: torch.Tensor,
    indices: list[int],
    attention_mask: torch.Tensor | None = None,
    kind: CaptureKind = CaptureKind.RESIDUAL_STREAM,
) -> torch.Tensor:
    """[B, S, len(indices), T]: the target's hidden states at the given HF indices (call under no_grad)."""
    with capture_layers(target_model, indices, kind) as captured:
        decoder_of(target_model)(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return torch.stack([captured[i] for i in indices], dim=2)


def extraction_indices(aux_layers: list[int], num_layers: int) -> list[int]:
    """What extract stores per token: the 3 aux states, then the final decoder layer's pre-norm output."""
    return [*aux_layers, num_layers]


def aux_hidden_states(
    target_model: nn.Module,
    input_ids: torch.Tensor,
    *,
    aux_layers: list[int] | None = None,
    attention_mask: torch.Tensor | None = None,
    kind: CaptureKind = CaptureKind.RESIDUAL_STREAM,
) -> torch.Tensor:
    """[B, n, 3T]: low‖mid‖high aux states, the drafter's `fc` input (default indices [2, N//2, N-3])."""
    layers = aux_layers or default_aux_layers(num_decoder_layers(target_model))
    states = capture_hidden_states(target_model, input_ids, layers, attention_mask, kind)
    return states.flatten(2)
