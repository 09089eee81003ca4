"""Greedy decoding of a target, plain or with greedy chain speculation by an EAGLE-3 drafter.

One sequence at a time, in torch: the reference engine serves with it and the eval stage measures with it.
Speculation per step: the drafter proposes `depth` tokens, the target verifies [last token, drafts] in one
forward, the longest prefix of drafts equal to the target's own greedy choices is kept, plus the target's next
token (the bonus). The output is therefore the target's plain greedy output, token for token.

Counting follows SGLang: the prefill yields the first token without a verify step; `verify_ct` counts verify
steps; `accept length` = completion tokens / verify steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache

from drafting.ml.capture import capture_layers
from drafting.ml.drafter import Eagle3Drafter

StepCallback = Callable[[list[int]], None]
"""Called after each step with the tokens it added (for streaming)."""


@dataclass
class DecodeResult:
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str = "length"  # "length" or "stop" (an EOS token was produced)
    verify_ct: int = 0
    accepted_drafts: list[int] = field(
        default_factory=list
    )  # per verify step: drafts accepted (bonus excluded)
    depth: int = 0

    @property
    def accept_length(self) -> float | None:
        return len(self.output_ids) / self.verify_ct if self.verify_ct else None


@dataclass(frozen=True)
class DecodeLimits:
    max_new_tokens: int
    eos_ids: frozenset[int] = frozenset()


class _Output:
    """Collects emitted tokens and stops at the token limit or an EOS token."""

    def __init__(self, limits: DecodeLimits, result: DecodeResult, on_step: StepCallback | None) -> None:
        self.limits, self.result, self.on_step = limits, result, on_step

    @property
    def done(self) -> bool:
        return (
            self.result.finish_reason == "stop" or len(self.result.output_ids) >= self.limits.max_new_tokens
        )

    def emit(self, tokens: Sequence[int]) -> None:
        added: list[int] = []
        for token in tokens:
            if self.done:
                break
            added.append(token)
            self.result.output_ids.append(token)
            if token in self.limits.eos_ids:
                self.result.finish_reason = "stop"
        if added and self.on_step is not None:
            self.on_step(added)


@torch.inference_mode()
def greedy_decode(
    target: nn.Module, prompt_ids: Sequence[int], limits: DecodeLimits, on_step: StepCallback | None = None
) -> DecodeResult:
    """Plain greedy decoding with the target's KV cache: the baseline."""
    result = DecodeResult()
    output = _Output(limits, result, on_step)
    cache = DynamicCache()
    logits = _forward(target, list(prompt_ids), cache)
    output.emit([int(logits[-1].argmax())])
    while not output.done:
        logits = _forward(target, [result.output_ids[-1]], cache)
        output.emit([int(logits[-1].argmax())])
    return result


@torch.inference_mode()
def speculative_decode(
    target: nn.Module,
    drafter: Eagle3Drafter,
    prompt_ids: Sequence[int],
    limits: DecodeLimits,
    depth: int,
    on_step: StepCallback | None = None,
) -> DecodeResult:
    """Greedy chain speculative decoding: output identical to greedy_decode's."""
    result = DecodeResult(depth=depth)
    output = _Output(limits, result, on_step)
    cache = DynamicCache()
    draft_kv = DraftKV()
    context = list(prompt_ids)  # tokens whose target states are in `features` and in the cache
    logits, aux = _forward_capturing(target, context, cache, drafter)
    features = drafter.project(aux)  # drafter-space feature per context position
    pending = int(logits[-1].argmax())  # emitted, not yet run through the target
    output.emit([pending])
    while not output.done:
        drafts = draft_chain_cached(drafter, draft_kv, context, features, pending, depth)
        logits, aux = _forward_capturing(target, [pending, *drafts], cache, drafter)
        choices = [int(t) for t in logits.argmax(dim=-1)]
        accepted = _matching_prefix(drafts, choices)
        result.verify_ct += 1
        result.accepted_drafts.append(accepted)
        output.emit([*drafts[:accepted], choices[accepted]])
        context += [pending, *drafts[:accepted]]
        features = torch.cat([features, drafter.project(aux[:, : accepted + 1])], dim=1)
        _truncate_cache(cache, len(context))
        pending = choices[accepted]
    return result


def draft_chain(
    drafter: Eagle3Drafter, context: list[int], features: torch.Tensor, pending: int, depth: int
) -> list[int]:
    """`depth` greedy draft tokens (target ids) after `pending`.

    Position i reads (token i+1, feature of position i): the target's projected state for context
    positions, then the drafter's own output for drafted ones (pre-norm, or normed under the draft's
    `norm_output`), as SGLang's draft decode does.
    Recomputed without a cache on every step: slow, but nothing can get out of sync. The decoder uses
    `draft_chain_cached` (the same drafts, tested); this one is the reference it is checked against.
    """
    device = features.device
    input_ids = torch.tensor([[*context[1:], pending]], device=device)
    step_features = features
    drafts: list[int] = []
    for _ in range(depth):
        logits, hidden = drafter.forward_sequence(input_ids, step_features)
        draft_id = drafter.draft_to_target(logits[0, -1].argmax().view(1))
        drafts.append(int(draft_id[0]))
        input_ids = torch.cat([input_ids, draft_id.view(1, 1).to(device)], dim=1)
        step_features = torch.cat([step_features, hidden[:, -1:]], dim=1)
    return drafts


@dataclass
class DraftKV:
    """The drafter's keys and values of the context positions, computed once each.

    Position j of the drafter reads (token j+1, the target's feature at j): once the target has verified a
    step, both are final for every context position, the last one included (it reads the token emitted last,
    which the next step's context ends with). Only the drafted positions of a step are recomputed, so a step
    costs `depth` one-token forwards instead of `depth` passes over the whole context.
    """

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[2])


def draft_chain_cached(
    drafter: Eagle3Drafter,
    kv: DraftKV,
    context: list[int],
    features: torch.Tensor,
    pending: int,
    depth: int,
) -> list[int]:
    """`draft_chain`'s drafts (the same inputs at every position) with the context positions' keys and
    values kept in `kv` across steps; the drafted positions' are dropped after the step."""
    device = features.device
    start = kv.length
    tokens = [*context[1:], pending][start:]
    logits, hidden, keys, values = _draft_step(
        drafter, kv.keys, kv.values, torch.tensor([tokens], device=device), features[:, start:], start
    )
    kv.keys, kv.values = keys, values
    drafts: list[int] = []
    position = len(context)
    for step in range(depth):
        draft_id = drafter.draft_to_target(logits[0, -1].argmax().view(1))
        drafts.append(int(draft_id[0]))
        if step == depth - 1:
            break
        logits, hidden, keys, values = _draft_step(
            drafter, keys, values, draft_id.view(1, 1).to(device), hidden[:, -1:], position + step
        )
    return drafts


def _draft_step(
    drafter: Eagle3Drafter,
    past_keys: torch.Tensor | None,
    past_values: torch.Tensor | None,
    input_ids: torch.Tensor,
    features: torch.Tensor,
    start: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The drafter's decoder layer over positions start.. (attending to the past keys too): logits,
    the features the next step reads (`next_features`), and the keys and values with these positions
    appended."""
    layer = drafter.midlayer
    hidden = drafter.project(features)
    count = input_ids.shape[1]
    positions = torch.arange(start, start + count, device=input_ids.device)[None]
    cos, sin = drafter.rotary(positions, hidden.dtype)
    embeds = drafter.embed_tokens(input_ids).to(hidden.dtype)
    q, k, v = layer.self_attn.project_qkv(layer.attention_input(embeds, hidden), cos, sin)
    keys = k if past_keys is None else torch.cat([past_keys, k], dim=2)
    values = v if past_values is None else torch.cat([past_values, v], dim=2)
    mask = None
    if count > 1:  # query i (position start+i) sees keys 0..start+i
        mask = torch.ones(count, keys.shape[2], dtype=torch.bool, device=q.device).tril(diagonal=start)
    attended = F.scaled_dot_product_attention(
        q, keys, values, attn_mask=mask, enable_gqa=q.shape[1] != keys.shape[1]
    )
    out = layer.finish(hidden, attended)
    return drafter.logits(out), drafter.next_features(out), keys, values


def _matching_prefix(drafts: Sequence[int], choices: Sequence[int]) -> int:
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == choices[accepted]:
        accepted += 1
    return accepted


def _forward(target: nn.Module, tokens: list[int], cache: DynamicCache) -> torch.Tensor:
    device = _device_of(target)
    out = target(input_ids=torch.tensor([tokens], device=device), past_key_values=cache, use_cache=True)
    logits: torch.Tensor = out.logits[0]
    return logits


def _forward_capturing(
    target: nn.Module, tokens: list[int], cache: DynamicCache, drafter: Eagle3Drafter
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target logits [n, V] and the aux states [1, n, 3T] the drafter reads (the states it was trained
    on: its layers, captured as its serving class captures them), in one forward."""
    aux_layers = drafter.aux_layers
    with capture_layers(target, aux_layers, drafter.aux_capture) as captured:
        logits = _forward(target, tokens, cache)
    return logits, torch.cat([captured[i] for i in aux_layers], dim=-1)


def _truncate_cache(cache: DynamicCache, keep: int) -> None:
    """Drop the rejected drafts' keys and values (a negative crop removes that many tokens)."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
