"""Tiny random models for the serving tests and the CPU benchmarks (no hub downloads here).

`make_pair` writes a random Llama target (HF folder) and an EAGLE-3 drafter in SGLang's layout. With
`fit_steps`, the drafter is first fitted to the target's own greedy continuations of a few prompts (a short
training-time-test fit), so acceptance is above 1 on those prompts: a plumbing check, not a quality figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from drafting.ml.drafter import Eagle3Drafter, aux_hidden_states, default_aux_layers, save_drafter
from drafting.serving.engine.decoding import DecodeLimits, greedy_decode


@dataclass(frozen=True)
class TinyPair:
    target: Path
    draft: Path
    prompts: list[list[int]]


def tiny_target_config(layers: int = 8, vocab: int = 256, hidden: int = 64) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=1024,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def tiny_prompts(count: int, length: int = 12, vocab: int = 256, seed: int = 1) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (length,), generator=generator).tolist() for _ in range(count)]


def make_pair(
    root: Path,
    *,
    layers: int = 8,
    seed: int = 0,
    fit_steps: int = 0,
    prompts: int = 4,
    new_tokens: int = 48,
    prompt_ids: list[list[int]] | None = None,
) -> TinyPair:
    torch.manual_seed(seed)
    target = LlamaForCausalLM(tiny_target_config(layers)).eval()
    target.save_pretrained(root / "target")
    target_config = json.loads((root / "target" / "config.json").read_text())
    vocab = int(target_config["vocab_size"])
    drafter = Eagle3Drafter.from_target_config(
        target_config, draft_vocab_size=vocab, aux_layer_ids=default_aux_layers(layers)
    )
    drafter.set_target_embeddings(target.get_input_embeddings().weight.detach())
    prompt_ids = prompt_ids or tiny_prompts(prompts, vocab=vocab, seed=seed + 1)
    if fit_steps:
        sequences = [_greedy_sequence(target, p, new_tokens) for p in prompt_ids]
        fit_drafter(target, drafter, sequences, steps=fit_steps)
    save_drafter(drafter, root / "draft", target_config=target_config)
    return TinyPair(root / "target", root / "draft", prompt_ids)


def _by_length(prompts: list[list[int]]) -> list[list[list[int]]]:
    """Prompts grouped by length, so each group stacks into one batch without padding."""
    groups: dict[int, list[list[int]]] = {}
    for prompt in prompts:
        groups.setdefault(len(prompt), []).append(prompt)
    return list(groups.values())


def _greedy_sequence(target: torch.nn.Module, prompt: list[int], new_tokens: int) -> list[int]:
    return prompt + greedy_decode(target, prompt, DecodeLimits(new_tokens)).output_ids


def fit_drafter(
    target: torch.nn.Module, drafter: Eagle3Drafter, sequences: list[list[int]], *, steps: int, ttt: int = 3
) -> float:
    """Fit the drafter to predict the target's tokens (TTT unroll of `ttt` steps); returns the last loss.

    Sequences of equal length form one batch; the steps cycle over the batches.
    """
    batches = []
    for group in _by_length(sequences):
        batch = torch.tensor(group)
        with torch.no_grad():
            aux = aux_hidden_states(target, batch, aux_layers=drafter.aux_layers)
        batches.append((batch, aux[:, :-1], batch[:, 1:]))
    trainable = [p for p in drafter.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=3e-3)
    loss = torch.tensor(0.0)
    for step in range(steps):
        batch, features, input_ids = batches[step % len(batches)]
        outputs = drafter.forward_ttt(input_ids, features, ttt)
        loss = torch.stack([_step_loss(drafter, hidden, batch, k) for k, hidden in enumerate(outputs)]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    drafter.eval()
    return float(loss.detach())


def _step_loss(drafter: Eagle3Drafter, hidden: torch.Tensor, batch: torch.Tensor, step: int) -> torch.Tensor:
    """Step k at position j predicts token j + k + 2 of the sequence."""
    labels = batch[:, step + 2 :]
    logits = drafter.logits(hidden[:, : labels.shape[1]])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
