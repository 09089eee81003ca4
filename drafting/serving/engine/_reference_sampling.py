"""The reference engine's sampled decoding: temperature, top-k and top-p over the target's logits, one
sequence at a time with its KV cache, seeded per request.

SGLang's semantics as far as `generate` relies on them: temperature 0 means greedy (handled by
decoding.greedy_decode, not here); top_k −1 keeps the whole vocabulary; top_p keeps the smallest set of tokens
whose probabilities reach p; `sampling_seed` makes a request reproducible (SGLang honours it only under
--enable-deterministic-inference; the reference engine always does, with torch's CPU generator).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache

from drafting.serving.engine.decoding import DecodeLimits, DecodeResult, StepCallback


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None


@torch.inference_mode()
def sample_decode(
    target: nn.Module,
    prompt_ids: list[int],
    limits: DecodeLimits,
    sampling: Sampling,
    on_step: StepCallback | None = None,
) -> DecodeResult:
    """Sample up to limits.max_new_tokens tokens, stopping after an EOS (kept in the output, as SGLang)."""
    device = next(target.parameters()).device
    generator = torch.Generator(device="cpu")
    generator.manual_seed(sampling.seed if sampling.seed is not None else secrets.randbits(63))
    result = DecodeResult()
    cache = DynamicCache()
    tokens = list(prompt_ids)
    while len(result.output_ids) < limits.max_new_tokens:
        out = target(input_ids=torch.tensor([tokens], device=device), past_key_values=cache, use_cache=True)
        token = _pick(out.logits[0, -1].float().cpu(), sampling, generator)
        result.output_ids.append(token)
        if on_step is not None:
            on_step([token])
        if token in limits.eos_ids:
            result.finish_reason = "stop"
            break
        tokens = [token]
    return result


def _pick(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> int:
    scaled = logits / sampling.temperature
    if 0 < sampling.top_k < scaled.numel():
        kth = torch.topk(scaled, sampling.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        before = torch.cumsum(ordered, dim=0) - ordered  # mass of the tokens ranked above each one
        ordered = ordered.masked_fill(before >= sampling.top_p, 0.0)  # the top token always stays
        probs = torch.zeros_like(probs).scatter(0, order, ordered)
    return int(torch.multinomial(probs, 1, generator=generator))
