"""Offline acceptance: decode a prompt set with the target and its drafter at several depths, in process.

Same decoding code as the reference engine. Two acceptance lengths are reported because SGLang reports two:
`accept_length` = Σ(accepted drafts + 1) / Σ verify steps (the `accept len:` log line, /server_info) and
`accept_length_meta` = Σ completion tokens / Σ verify steps (meta_info; what the benchmark stage computes,
slightly higher since the prefill's token has no verify step). A set with categories also gets both per
category (`by_category`).

With `check_outputs`, every prompt is also decoded plainly and each speculative output that differs is judged
at its first divergent position by the target itself (drafting.serving.evaluation.divergence): a numerical
near-tie (both tokens' logits within the stated bound of the target's top logit, a rounding flip between two
kernels' reduction orders) or a real loss (a token the target would not choose). `outputs_match` is False only
on a real loss, so a drafter is never refused for bf16 rounding; `outputs_identical` says whether every output
was bit-for-bit the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from drafting.serving.engine.decoding import DecodeLimits, DecodeResult, greedy_decode, speculative_decode
from drafting.serving.engine.models import LoadedModels
from drafting.serving.evaluation.divergence import Divergence, TargetScorer, classify
from drafting.serving.prompts import Prompt
from drafting.serving.prompts.categories import PromptTally, by_category

Progress = Callable[[int, int], None]
VERDICTS = ("identical", "near_tie", "real_loss", "unscored")


class LoadedTargetScorer(TargetScorer):
    """The target eval already holds, as the judge: when eval runs in float32 it is exactly what
    TargetScorer would load, so a second copy would only cost memory and load time."""

    def __init__(self, model: nn.Module, description: str) -> None:
        super().__init__("(the loaded target)")
        self._model = model
        self.description = description


@dataclass
class DepthTally:
    depth: int
    results: list[DecodeResult] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)

    def row(self, prompts: Sequence[Prompt], checked: bool) -> dict[str, Any]:
        steps = [a for r in self.results for a in r.accepted_drafts]
        verify = len(steps)
        completion = sum(len(r.output_ids) for r in self.results)
        reach = [sum(a >= j for a in steps) / verify if verify else 0.0 for j in range(1, self.depth + 1)]
        row: dict[str, Any] = {
            "depth": self.depth,
            "accept_length": (sum(steps) + verify) / verify if verify else None,
            "accept_length_meta": completion / verify if verify else None,
            "verify_steps": verify,
            "completion_tokens": completion,
            "position_reach_rate": [round(r, 4) for r in reach],
            "position_accept_rate": [round(r, 4) for r in _conditional(reach)],
            **self._outputs(prompts, checked),
        }
        categories = by_category(
            [
                PromptTally(p.category, len(r.output_ids), r.verify_ct, sum(r.accepted_drafts))
                for p, r in zip(prompts, self.results, strict=True)
            ]
        )
        if categories is not None:
            row["by_category"] = categories
        return row

    def _outputs(self, prompts: Sequence[Prompt], checked: bool) -> dict[str, Any]:
        if not checked:
            return {"outputs_match": None, "outputs_identical": None, "mismatched_prompts": None}
        counts = dict.fromkeys(VERDICTS, 0)
        for divergence in self.divergences:
            counts[divergence.verdict] += 1
        match: bool | None = counts["real_loss"] == 0
        if match and counts["unscored"]:
            match = None  # a divergence nobody could judge: neither passed nor failed
        divergent = [d for d in self.divergences if d.verdict != "identical"]
        return {
            "outputs_match": match,
            "outputs_identical": not divergent,
            "mismatched_prompts": len(divergent),
            "divergence": counts,
            "divergent_prompts": [_divergent_row(d, prompts[d.request]) for d in divergent],
        }


_DIVERGENCE_KEYS = ("position", "verdict", "baseline_token", "candidate_token", "margin", "bound", "gaps")


def _divergent_row(divergence: Divergence, prompt: Prompt) -> dict[str, Any]:
    keep = (*_DIVERGENCE_KEYS, "scored_in", "note")
    row = {"prompt": divergence.request, **{k: v for k, v in divergence.as_dict().items() if k in keep}}
    if prompt.id is not None:
        row["id"] = prompt.id
    if prompt.category is not None:
        row["category"] = prompt.category
    return row


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
    scorer: TargetScorer | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """One row per depth (see the module doc for the fields). `scorer` judges divergent outputs (default:
    the loaded target itself, in the dtype it was loaded in)."""
    assert models.drafter is not None
    if check_outputs and scorer is None:
        scorer = LoadedTargetScorer(models.target, _dtype_of(models.target))
    tallies = [DepthTally(depth) for depth in depths]
    eos = frozenset() if ignore_eos else models.eos_ids
    for index, prompt in enumerate(prompts):
        ids = prompt_ids(models, prompt)
        limits = DecodeLimits(prompt.max_new_tokens or max_new_tokens, eos)
        baseline = greedy_decode(models.target, ids, limits) if check_outputs else None
        for tally in tallies:
            result = speculative_decode(models.target, models.drafter, ids, limits, tally.depth)
            tally.results.append(result)
            if baseline is not None and scorer is not None:
                verdict = classify(index, ids, baseline.output_ids, result.output_ids, scorer)
                tally.divergences.append(verdict)
        if progress is not None:
            progress(index + 1, len(prompts))
    return [tally.row(prompts, check_outputs) for tally in tallies]


def prompt_ids(models: LoadedModels, prompt: Prompt) -> list[int]:
    """A prompt's token ids: a rendered chat prompt's own, a text prompt through the target's tokenizer (as
    SGLang tokenizes the `text` of a /generate request), else the text's bytes (targets without one)."""
    if prompt.input_ids is None and models.tokenizer is not None:
        if prompt.text is None:
            raise ValueError("a chat prompt must be rendered with the target's chat template first")
        return list(models.tokenizer.encode(prompt.text))
    return prompt.ids_or_bytes(models.vocab_size)


def _dtype_of(model: nn.Module) -> str:
    parameter = next(model.parameters())
    return f"{str(parameter.dtype).removeprefix('torch.')} on {parameter.device}"
