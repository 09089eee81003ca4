"""The sweep's judge: each config's outputs against the baseline's, every first divergence scored by the
target (drafting.serving.evaluation.divergence) once, within a scoring budget; where the target cannot
judge, outputs are compared bit for bit and every result says why."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from drafting.serving.evaluation import divergence as numerics
from drafting.serving.evaluation.divergence import (
    NEAR_TIE_MIN_LOGITS,
    Divergence,
    TargetScorer,
    classify,
    first_divergence,
)
from drafting.serving.evaluation.smoke import target_tokenizer
from drafting.serving.prompts import Prompt
from drafting.userfiles import check_model_folder

# The sweep's judge. A sweep sends the same prompts in every round of every config, so it compares many
# outputs; greedy outputs repeat, and where configs flip at a near-tie they flip at the same position (the
# target's logits tie there, whatever the draft). Each distinct first divergence is scored once (cached).
# Each scoring is a float32 forward of the prompt and the shared prefix on the CPU (the servers hold the
# GPUs): 1-2 s for a 135M target (2.2 s over up to 384 answer tokens), a minute for an 8B one over 1k
# tokens. A config gets MAX_SCORED_PER_CONFIG new scorings whatever they cost (every prompt of a 16-prompt
# sweep once), then more while its scoring has taken less than SCORING_BUDGET_S: on a 72-prompt held-out
# sweep of a 135M target a count of 16 alone left 81 of 113 divergences unjudged; the budget judged 56 and
# left 18 (docs/design/near-tie-judging.md). Divergences past both are reported `unscored`.
MAX_SCORED_PER_CONFIG = 16
SCORING_BUDGET_S = 120.0
MAX_DETAILS = 32  # divergence details kept per row (a result lives in the database and in events)
VERDICTS = ("identical", "near_tie", "real_loss", "unscored")


@dataclass(frozen=True)
class OutputPair:
    """One request of one round: the speculative output beside the baseline's for the same prompt (ids
    where the server sent them, None for text only; `prompt_tokens` as the server counted the prompt)."""

    request: int
    round: int
    baseline: tuple[int, ...] | None
    candidate: tuple[int, ...] | None
    baseline_text: str | None = None
    candidate_text: str | None = None
    prompt_tokens: int | None = None


def cpu_scorer(model: str | Path) -> tuple[TargetScorer | None, str | None]:
    """The target as a float32 judge on the CPU (a sweep's servers hold the GPUs), or why there is none."""
    folder = Path(model)
    try:
        check_model_folder(folder, "target folder")
    except (OSError, ValueError) as exc:
        return None, f"the target folder cannot be read here: {exc}"
    if not (folder / "config.json").is_file():
        return None, "the target folder has no config.json: it cannot be loaded in torch here"
    if not numerics.fits_in_float32(folder, "cpu"):
        return None, (
            "the target in float32 (twice its checkpoint's bytes) does not fit in half of this host's free "
            "memory, and a bf16 judge would round as much as the near-ties it judges"
        )
    return TargetScorer(folder, device="cpu"), None


@dataclass
class JudgedOutputs:
    """A config's outputs against the baseline's over all its rounds: one verdict per compared request."""

    verdicts: list[tuple[int, Divergence]] = field(default_factory=list)  # (round, verdict)
    compared: bool = True  # False: some round's batches could not be paired request by request
    strict_reason: str | None = None  # why this config is compared strictly (bit for bit), else None
    scored_in: str | None = None
    scored: int = 0  # new scorings this config spent (cache hits are free)
    scoring_s: float = 0.0  # the time they took
    max_scored: int = MAX_SCORED_PER_CONFIG
    budget_s: float = SCORING_BUDGET_S

    def over_budget(self) -> bool:
        return self.scored >= self.max_scored and self.scoring_s >= self.budget_s

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(VERDICTS, 0)
        for _, divergence in self.verdicts:
            counts[divergence.verdict] += 1
        return counts

    def row_fields(self) -> dict[str, Any]:
        """`outputs_match` is "no real loss" (strictly: "identical" where the target could not judge);
        `outputs_identical` says whether every output was the same token for token."""
        if not self.compared or not self.verdicts:
            return {"outputs_match": None, "outputs_identical": None, "mismatched_requests": None}
        counts = self.counts()
        divergent = [(number, d) for number, d in self.verdicts if d.verdict != "identical"]
        match = not divergent if self.strict_reason else counts["real_loss"] == 0
        details = _grouped(divergent)
        return {
            "outputs_match": match,
            "outputs_identical": not divergent,
            "mismatched_requests": len(divergent),
            "divergences": counts,
            "divergence_details": details[:MAX_DETAILS],
            "divergence_details_left_out": max(0, len(details) - MAX_DETAILS),
            "divergence_judge": {
                "mode": "strict" if self.strict_reason else "target",
                "strict_reason": self.strict_reason,
                "scored_in": self.scored_in,
                "scored": self.scored,
                "scoring_s": round(self.scoring_s, 3),
                "max_scored": self.max_scored,
                "budget_s": self.budget_s,
            },
        }


def _grouped(divergent: Sequence[tuple[int, Divergence]]) -> list[dict[str, Any]]:
    """One entry per distinct divergence with the rounds it happened in; real losses first."""
    entries: dict[tuple[Any, ...], dict[str, Any]] = {}
    for number, d in divergent:
        key = (d.request, d.position, d.baseline_token, d.candidate_token, d.verdict)
        entry = entries.setdefault(key, {**d.as_dict(), "rounds": []})
        entry["rounds"].append(number)
    order = {"real_loss": 0, "unscored": 1, "near_tie": 2}
    return sorted(entries.values(), key=lambda e: (order.get(e["verdict"], 3), e["request"]))


class SweepJudge:
    """Judges each config's outputs against the baseline's; the target is loaded (on the CPU) only when a
    divergence needs it, once for the whole sweep. Where it cannot be, outputs are compared strictly and
    every result says why. `prompt_ids(request)` gives a prompt's token ids as the server got them."""

    def __init__(
        self,
        model: str | Path | None,
        prompt_ids: Callable[[int], Sequence[int] | None],
        *,
        max_scored: int | None = None,
        budget_s: float | None = None,
        scorer: TargetScorer | None = None,
    ) -> None:
        """`scorer`: the target as the sweep's smoke check also judges with (one load for both), used once
        cpu_scorer has found that the target fits in float32 here."""
        self.model, self.prompt_ids = model, prompt_ids
        self.max_scored = MAX_SCORED_PER_CONFIG if max_scored is None else max_scored
        self.budget_s = SCORING_BUDGET_S if budget_s is None else budget_s
        self._shared = scorer
        self._scorer: TargetScorer | None = None
        self._looked = model is None
        self.strict_reason: str | None = None if model else "no target folder to score with"
        self._cache: dict[tuple[Any, ...], Divergence] = {}
        self.scored = self.reused = 0

    def judge(self, pairs: Sequence[OutputPair], *, compared: bool = True) -> JudgedOutputs:
        judged = JudgedOutputs(compared=compared, max_scored=self.max_scored, budget_s=self.budget_s)
        judged.verdicts = [(pair.round, self._one(pair, judged)) for pair in pairs]
        return judged

    def summary(self) -> dict[str, Any]:
        scorer = self._scorer.description if self._scorer is not None else None
        return {
            "scorer": scorer if self._looked else "not loaded: no divergence needed it",
            "strict_reason": self.strict_reason,
            "max_scored_per_config": self.max_scored,
            "scoring_budget_s_per_config": self.budget_s,
            "scored": self.scored,
            "reused": self.reused,
            "near_tie_bound": f"max({NEAR_TIE_MIN_LOGITS}, 2^-5·|top logit|) logits",
        }

    def release(self) -> None:
        """Drop the loaded target (its float32 copy can be tens of GB of host memory)."""
        if self._scorer is not None:
            self._scorer.release()

    def _one(self, pair: OutputPair, judged: JudgedOutputs) -> Divergence:
        if pair.baseline is None or pair.candidate is None:
            if pair.baseline_text == pair.candidate_text:
                return Divergence(pair.request, None, "identical")
            return _strict(judged, pair, None, "the server sent text without output ids: no token to score")
        position = first_divergence(pair.baseline, pair.candidate)
        if position is None:
            return Divergence(pair.request, None, "identical")
        prompt = self.prompt_ids(pair.request)
        if prompt is None:
            return _strict(judged, pair, position, "its prompt's token ids are not known here")
        if pair.prompt_tokens is not None and pair.prompt_tokens != len(prompt):
            why = f"its prompt is {len(prompt)} ids here and {pair.prompt_tokens} on the server"
            return _strict(judged, pair, position, why)
        tokens = _tokens(pair.baseline, pair.candidate, position)
        key = (tuple(prompt), pair.baseline[:position], *tokens)
        if key in self._cache:
            self.reused += 1
            return replace(self._cache[key], request=pair.request)
        scorer = self._scorer_or_none()
        if scorer is None:
            return _strict(judged, pair, position, self.strict_reason or "no scorer", sweep_wide=True)
        scores = None not in tokens  # an output that ended early is a real loss without a forward
        if scores and judged.over_budget():
            note = (
                f"over this config's scoring cap ({judged.scored} distinct divergences in "
                f"{judged.scoring_s:.0f} s; {self.max_scored} are always judged, more within "
                f"{self.budget_s:.0f} s): not judged"
            )
            return Divergence(pair.request, position, "unscored", *tokens, note=note)
        began = time.monotonic()
        try:
            verdict = classify(pair.request, prompt, pair.baseline, pair.candidate, scorer)
        except (RuntimeError, MemoryError) as exc:  # e.g. the CPU allocator out of memory mid-sweep
            scorer.load_error = f"{type(exc).__name__}: {exc}"
            verdict = Divergence(pair.request, position, "unscored")
        if verdict.verdict == "unscored":
            self._scorer, self.strict_reason = None, f"the target could not be scored: {scorer.load_error}"
            return _strict(judged, pair, position, self.strict_reason, sweep_wide=True)
        if scores:
            judged.scored += 1
            judged.scoring_s += time.monotonic() - began
            self.scored += 1
        judged.scored_in = verdict.scored_in or judged.scored_in
        self._cache[key] = verdict
        return verdict

    def _scorer_or_none(self) -> TargetScorer | None:
        if not self._looked:
            self._looked = True
            assert self.model is not None
            self._scorer, self.strict_reason = cpu_scorer(self.model)
            if self._scorer is not None and self._shared is not None:
                self._scorer = self._shared
        return self._scorer


def _tokens(
    baseline: Sequence[int], candidate: Sequence[int], position: int
) -> tuple[int | None, int | None]:
    return (
        baseline[position] if position < len(baseline) else None,
        candidate[position] if position < len(candidate) else None,
    )


def _strict(
    judged: JudgedOutputs, pair: OutputPair, position: int | None, why: str, *, sweep_wide: bool = False
) -> Divergence:
    """A divergence the target cannot judge: its config falls back to the strict (bit for bit) comparison."""
    if judged.strict_reason is None:
        judged.strict_reason = why if sweep_wide else f"request {pair.request} (round {pair.round}): {why}"
    tokens: tuple[int | None, int | None] = (None, None)
    if position is not None and pair.baseline is not None and pair.candidate is not None:
        tokens = _tokens(pair.baseline, pair.candidate, position)
    return Divergence(pair.request, position, "unscored", *tokens, note=f"compared strictly: {why}")


class PromptIds:
    """A prompt's token ids as the server got them (what a divergence is scored after): its own ids, its
    bytes under send_as input_ids (load_client.request_body), else its text through the target's tokenizer,
    as SGLang and the reference engine tokenize a `text` request. None where they cannot be known here."""

    def __init__(self, prompts: Sequence[Prompt], send_as: str, model: str) -> None:
        self.prompts, self.send_as, self.model = prompts, send_as, model
        self._tokenizer: Any = None
        self._loaded = False

    def __call__(self, index: int) -> list[int] | None:
        prompt = self.prompts[index]
        if prompt.input_ids is not None or self.send_as == "input_ids":
            return prompt.ids_or_bytes()
        tokenizer = self._load()
        if tokenizer is None or prompt.text is None:
            return None
        return list(tokenizer.encode(prompt.text))

    def _load(self) -> Any:
        if not self._loaded:
            self._loaded = True
            try:
                self._tokenizer = target_tokenizer(self.model)
            except (OSError, ValueError):  # no usable tokenizer: the divergence is compared bit for bit
                self._tokenizer = None
        return self._tokenizer
