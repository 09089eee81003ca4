"""Where speculative and plain greedy outputs part, and why: a numerical near-tie, or a real loss.

Greedy speculative decoding is lossless in exact arithmetic. In bf16 it is not bit-exact: verification runs
k+1 positions in one forward (other kernels, other reduction orders), so where the target's top two logits are
nearly equal the argmax can flip (measured on an H200: 10 of 16 prompts of a natural code LM differ over 128
tokens, in SGLang and in a torch re-implementation alike). After a flip the two continuations are different
texts, so only the *first* divergent position says anything. There the target itself is the judge: score the
shared prefix in torch (float32 where it fits), take the top-two logit margin at that position.

    near_tie   both tokens' logits lie within `near_tie_bound` of the target's top logit: a rounding flip
               among tied tokens (two, or more: on the H200 a SmolLM2 position had three tokens within 0.003
               logits, and the two engines each picked a different one that was not the float32 argmax)
    real_loss  anything else (a token clearly below the top): the engine emitted a token the target would not
               have chosen, a lost verify, and that fails a gate
    unscored   the target could not be scored here (too large for this machine's memory): reported, not judged

The bound. bf16 keeps 8 significant bits, so one rounding moves a value by up to 2^-8 of its magnitude
(relative precision 2^-8). The two paths round the residual stream differently in every layer and the two
competing logits can move in opposite directions, so the margin between them can shift by several such units
of the logits' magnitude. eyas takes 8 units (2^-5 of the top logit's magnitude, e.g. 0.62 at a logit of 20)
and never less than 0.5 logits (small-magnitude logits still carry the hidden state's rounding). A margin
above it is a choice the target makes clearly; both paths must agree on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from drafting.userfiles import check_model_folder

NEAR_TIE_MIN_LOGITS = 0.5
NEAR_TIE_RELATIVE = 2.0**-5  # 8 units of bf16's relative precision 2^-8


def near_tie_bound(top_logit: float) -> float:
    """The largest top-two margin counted as a numerical near-tie where the top logit is `top_logit`."""
    return max(NEAR_TIE_MIN_LOGITS, NEAR_TIE_RELATIVE * abs(top_logit))


@dataclass(frozen=True)
class Divergence:
    request: int
    position: int | None  # first output index where the two differ; None: identical
    verdict: str  # identical | near_tie | real_loss | unscored
    baseline_token: int | None = None
    candidate_token: int | None = None
    top_two: tuple[int, int] | None = None
    top_logits: tuple[float, float] | None = None
    margin: float | None = None  # the target's top-two margin at the position
    bound: float | None = None
    gaps: tuple[float, float] | None = None  # top logit minus the baseline's and the candidate's token logit
    scored_in: str | None = None  # "float32 on cpu", …
    note: str = ""

    @property
    def is_real_loss(self) -> bool:
        return self.verdict == "real_loss"

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def first_divergence(baseline: Sequence[int], candidate: Sequence[int]) -> int | None:
    """First index where the outputs differ (a shorter output differs where it ends); None when equal."""
    for index, (a, b) in enumerate(zip(baseline, candidate, strict=False)):
        if a != b:
            return index
    return None if len(baseline) == len(candidate) else min(len(baseline), len(candidate))


class TargetScorer:
    """The target in torch, loaded on first use: next-token logits after a token prefix."""

    def __init__(self, model: str | Path, *, device: str = "auto") -> None:
        self.model_path = str(model)
        self.device_name = device
        self._model: Any = None
        self.description = ""
        self.load_error: str | None = None

    def _load(self) -> Any:
        if self._model is not None or self.load_error is not None:
            return self._model
        import torch
        from transformers import AutoModelForCausalLM

        device = self._device(torch)
        dtype = torch.float32 if _fits_in_float32(Path(self.model_path), device) else torch.bfloat16
        try:
            check_model_folder(self.model_path, "target folder")  # a FIFO or device would hang transformers
            model: Any = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
            self._model = model.to(device).eval()
        except (OSError, RuntimeError, ValueError) as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            return None
        self.description = f"{str(dtype).removeprefix('torch.')} on {device}"
        return self._model

    def _device(self, torch: Any) -> str:
        if self.device_name != "auto":
            return self.device_name
        return "cuda" if torch.cuda.is_available() else "cpu"

    def next_logits(self, prefix: Sequence[int]) -> Any:
        """float32 logits [V] of the token after `prefix` (None when the target cannot be loaded)."""
        import torch

        model = self._load()
        if model is None:
            return None
        device = next(model.parameters()).device
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([list(prefix)], device=device), use_cache=False)
        return out.logits[0, -1].float().cpu()

    def release(self) -> None:
        """Drop the loaded model; the next scoring loads it again."""
        self._model = None


def classify(
    request: int,
    prompt_ids: Sequence[int],
    baseline: Sequence[int],
    candidate: Sequence[int],
    scorer: TargetScorer,
) -> Divergence:
    """Judge the first position where `candidate` (speculative) leaves `baseline` (plain greedy)."""
    position = first_divergence(baseline, candidate)
    if position is None:
        return Divergence(request, None, "identical")
    base_token = baseline[position] if position < len(baseline) else None
    cand_token = candidate[position] if position < len(candidate) else None
    if base_token is None or cand_token is None:
        note = "one output ended early (an EOS or an error), the other went on"
        return Divergence(request, position, "real_loss", base_token, cand_token, note=note)
    logits = scorer.next_logits([*prompt_ids, *baseline[:position]])
    if logits is None:
        note = f"the target could not be scored here: {scorer.load_error}"
        return Divergence(request, position, "unscored", base_token, cand_token, note=note)
    values, indices = logits.topk(2)
    top = (int(indices[0]), int(indices[1]))
    top_logits = (round(float(values[0]), 5), round(float(values[1]), 5))
    bound = near_tie_bound(float(values[0]))
    gaps = (round(float(values[0] - logits[base_token]), 5), round(float(values[0] - logits[cand_token]), 5))
    near = max(gaps) < bound
    return Divergence(
        request,
        position,
        "near_tie" if near else "real_loss",
        base_token,
        cand_token,
        top,
        top_logits,
        round(float(values[0] - values[1]), 5),
        round(bound, 4),
        gaps,
        scorer.description,
        _note(near, gaps, bound, top),
    )


def _note(near: bool, gaps: tuple[float, float], bound: float, top: tuple[int, int]) -> str:
    below = f"baseline's token {gaps[0]:.4f}, candidate's {gaps[1]:.4f} logits below the top"
    if near:
        return f"{below}: both within the near-tie bound {bound:.3f}, a rounding flip among tied tokens"
    return f"{below} (top two {list(top)}): over the near-tie bound {bound:.3f}, not a rounding flip"


def _fits_in_float32(folder: Path, device: str) -> bool:
    """float32 weights (twice a bf16 checkpoint's bytes) fit in half of the memory free on `device`."""
    stored = sum(p.stat().st_size for p in folder.glob("*.safetensors")) + sum(
        p.stat().st_size for p in folder.glob("*.bin")
    )
    needed = 2 * stored if stored else 0
    try:
        if device.startswith("cuda"):
            import torch

            free, _ = torch.cuda.mem_get_info(torch.device(device))
        else:
            import psutil

            free = psutil.virtual_memory().available
    except (RuntimeError, ImportError, AssertionError):
        return True
    return needed < free // 2


# The sweep's judge. A sweep sends the same prompts in every round of every config, so it compares many
# outputs; greedy outputs repeat, and where configs flip at a near-tie they flip at the same position (the
# target's logits tie there, whatever the draft). Each distinct first divergence is scored once (cached).
# Each scoring is a float32 forward of the prompt and the shared prefix on the CPU (the servers hold the
# GPUs): about a second for a 135M target and a minute for an 8B one over 1k tokens. A config gets
# MAX_SCORED_PER_CONFIG new scorings whatever they cost (every prompt of a 16-prompt sweep once), then more
# while its scoring has taken less than SCORING_BUDGET_S: GPU run 8's held-out sweep (72 prompts, 135M
# target) left 81 of 113 divergences unjudged under a count of 16 alone, where two minutes judge them all.
# Divergences past both are reported `unscored`, not judged.
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
    if not _fits_in_float32(folder, "cpu"):
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
                "scoring_s": round(self.scoring_s, 1),
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
