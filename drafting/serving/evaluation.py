"""Offline acceptance: decode a prompt set with the target and its drafter at several depths, in process.

Same decoding code as the reference engine. Two acceptance lengths are reported because SGLang reports two:
`accept_length` = Σ(accepted drafts + 1) / Σ verify steps (the `accept len:` log line, /server_info) and
`accept_length_meta` = Σ completion tokens / Σ verify steps (meta_info; what the benchmark stage computes,
slightly higher since the prefill's token has no verify step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from drafting.serving.decoding import DecodeLimits, DecodeResult, greedy_decode, speculative_decode
from drafting.serving.models import LoadedModels
from drafting.serving.prompts import Prompt

Progress = Callable[[int, int], None]


@dataclass
class DepthTally:
    depth: int
    results: list[DecodeResult] = field(default_factory=list)
    mismatches: int = 0

    def row(self, checked: bool) -> dict[str, Any]:
        steps = [a for r in self.results for a in r.accepted_drafts]
        verify = len(steps)
        completion = sum(len(r.output_ids) for r in self.results)
        reach = [sum(a >= j for a in steps) / verify if verify else 0.0 for j in range(1, self.depth + 1)]
        return {
            "depth": self.depth,
            "accept_length": (sum(steps) + verify) / verify if verify else None,
            "accept_length_meta": completion / verify if verify else None,
            "verify_steps": verify,
            "completion_tokens": completion,
            "position_reach_rate": [round(r, 4) for r in reach],
            "position_accept_rate": [round(r, 4) for r in _conditional(reach)],
            "outputs_match": (self.mismatches == 0) if checked else None,
            "mismatched_prompts": self.mismatches if checked else None,
        }


def _conditional(reach: Sequence[float]) -> list[float]:
    """P(draft j accepted | drafts 1..j-1 accepted) from P(at least j accepted)."""
    previous, rates = 1.0, []
    for value in reach:
        rates.append(value / previous if previous > 0 else 0.0)
        previous = value
    return rates


def evaluate_acceptance(
    models: LoadedModels,
    prompts: Sequence[Prompt],
    depths: Sequence[int],
    *,
    max_new_tokens: int,
    ignore_eos: bool,
    check_outputs: bool,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """One row per depth (see the module doc for the fields)."""
    assert models.drafter is not None
    tallies = [DepthTally(depth) for depth in depths]
    eos = frozenset() if ignore_eos else models.eos_ids
    for index, prompt in enumerate(prompts):
        ids = _prompt_ids(models, prompt)
        limits = DecodeLimits(prompt.max_new_tokens or max_new_tokens, eos)
        baseline = greedy_decode(models.target, ids, limits) if check_outputs else None
        for tally in tallies:
            result = speculative_decode(models.target, models.drafter, ids, limits, tally.depth)
            tally.results.append(result)
            if baseline is not None and result.output_ids != baseline.output_ids:
                tally.mismatches += 1
        if progress is not None:
            progress(index + 1, len(prompts))
    return [tally.row(check_outputs) for tally in tallies]


def _prompt_ids(models: LoadedModels, prompt: Prompt) -> list[int]:
    if prompt.input_ids is None and models.tokenizer is not None:
        assert prompt.text is not None
        return list(models.tokenizer.encode(prompt.text))
    return prompt.ids_or_bytes(models.vocab_size)
