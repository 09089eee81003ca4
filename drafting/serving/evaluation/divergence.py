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

import inspect
from collections.abc import Sequence
from dataclasses import asdict, dataclass
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
        self._last_only: dict[str, int] = {}
        self.description = ""
        self.load_error: str | None = None

    def _load(self) -> Any:
        if self._model is not None or self.load_error is not None:
            return self._model
        import torch

        from drafting.ml.text_model import TargetModelError, load_text_model

        device = self._device(torch)
        dtype = torch.float32 if fits_in_float32(Path(self.model_path), device) else torch.bfloat16
        try:
            check_model_folder(self.model_path, "target folder")  # a FIFO or device would hang transformers
            model: Any = load_text_model(self.model_path, dtype=dtype)
            self._model = model.to(device).eval()
        except (OSError, RuntimeError, ValueError, TargetModelError) as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            return None
        self.description = f"{str(dtype).removeprefix('torch.')} on {device}"
        # The lm_head at the last position alone: a [prefix, vocab] float32 matmul is a fifth of a 135M
        # target's scoring on a CPU (1.97 -> 1.60 s over 450 tokens, 2 cores), and only its last row is read.
        accepts = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._last_only = {"logits_to_keep": 1} if accepts else {}
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
            out = model(
                input_ids=torch.tensor([list(prefix)], device=device), use_cache=False, **self._last_only
            )
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


def fits_in_float32(folder: Path, device: str) -> bool:
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
