"""Two benchmark results judged as a pair: which draft accepts more on the same requests, and by how much.

A sweep's accept length is pooled over its prompts (Σ completion tokens / Σ verify steps, meta_info's, as
SGLang's own benchmark reports). Two drafts asked the same requests (the same `prompt_set.requests_digest`)
differ prompt by prompt, and most of the spread between prompts is the prompts' own (code accepts longer
drafts than open writing), not the drafts'. Pairing removes it: the interval here resamples *prompts*
(the same resample for both drafts) and recomputes the pooled difference, a paired percentile bootstrap.
Two unpaired 8-question sweeps of one draft on SGLang moved a category by up to 0.1 (greedy text takes
another path at near-ties); this says whether a difference stands out from that. Past BOOTSTRAP_UP_TO
prompts (a set may hold 100,000) the interval is the normal one of the same statistic's linearisation (the
delta method), which is accurate there and takes one pass instead of RESAMPLES: a request must not take
minutes.
Both intervals are contract/paired_interval.py's, which the sweep's paired speedup uses too.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from contract.paired_interval import CONFIDENCE, RESAMPLES, delta_interval, percentile_bootstrap

BOOTSTRAP_UP_TO = 500  # prompts; past it the delta method (0.5 s for 72 prompts x 3 configs bootstrapped)
FEW_PROMPTS = 20  # under this a bootstrap over prompts understates the interval: say so


class NotComparable(ValueError):
    """The two results did not ask the same requests, or hold no per-prompt counts to pair."""


@dataclass(frozen=True)
class Counts:
    tokens: list[int]
    steps: list[int]

    def pooled(self, picks: Sequence[int]) -> float:
        steps = sum(self.steps[i] for i in picks)
        return sum(self.tokens[i] for i in picks) / steps if steps else 0.0


def compare(a: Mapping[str, Any], b: Mapping[str, Any], *, seed: int = 0) -> dict[str, Any]:
    """The paired comparison of result `a` against `b`, per config both measured (a single-mode result is
    one config, "single"): pooled accept lengths, their difference with its interval, per-prompt wins."""
    digest = _digest(a, "a")
    if digest != _digest(b, "b"):
        raise NotComparable(
            "the two benchmarks asked different requests (prompt_set.requests_digest differs): run both on "
            "the same prompt set, max_new_tokens and ignore_eos"
        )
    counts_a, counts_b = per_config_counts(a, "a"), per_config_counts(b, "b")
    shared = [label for label in counts_a if label in counts_b]
    if not shared:
        raise NotComparable(
            f"no config in both: a measured {sorted(counts_a)}, b measured {sorted(counts_b)}"
        )
    sizes = {len(counts[label].tokens) for counts in (counts_a, counts_b) for label in shared}
    if len(sizes) != 1:
        raise NotComparable(f"the results count different numbers of prompts ({sorted(sizes)})")
    rng = random.Random(seed)
    configs = [_config(label, counts_a[label], counts_b[label], rng) for label in shared]
    prompts = len(counts_a[shared[0]].tokens)
    notes = []
    if prompts < FEW_PROMPTS:
        notes.append(
            f"{prompts} prompts: a bootstrap over so few prompts understates the interval; ask "
            f"{FEW_PROMPTS} or more (the 72 held-out MT-Bench questions) before deciding between two drafts"
        )
    return {
        "requests_digest": digest,
        "prompts": prompts,
        "confidence": CONFIDENCE,
        "interval": (
            f"paired percentile bootstrap over prompts, {RESAMPLES} resamples"
            if prompts <= BOOTSTRAP_UP_TO
            else "normal, from the pooled difference's linearisation over prompts (delta method)"
        ),
        "configs": configs,
        "only_in_a": [label for label in counts_a if label not in counts_b],
        "only_in_b": [label for label in counts_b if label not in counts_a],
        "notes": notes,
    }


def per_config_counts(result: Mapping[str, Any], name: str) -> dict[str, Counts]:
    """{config label: per-prompt counts} of a sweep's measured rows, or {"single": …} of a single run."""
    if result.get("mode") == "single":
        return {"single": _counts(result.get("per_request"), name, "single")}
    rows = result.get("rows")
    measured = [
        row
        for row in (rows if isinstance(rows, list) else [])
        if isinstance(row, dict) and row.get("config") and row.get("accept_len") is not None
    ]
    return {str(row["config"]): _counts(row.get("per_prompt"), name, str(row["config"])) for row in measured}


def _digest(result: Mapping[str, Any], name: str) -> str:
    prompt_set = result.get("prompt_set")
    digest = prompt_set.get("requests_digest") if isinstance(prompt_set, dict) else None
    if not isinstance(digest, str):
        raise NotComparable(
            f"benchmark {name} has no prompt_set.requests_digest (recorded before eyas compared drafts): "
            "run it again to compare it"
        )
    return digest


def _counts(rows: Any, name: str, label: str) -> Counts:
    if not isinstance(rows, list) or not rows:
        raise NotComparable(f"benchmark {name}, config {label}: no per-prompt counts to pair; run it again")
    tokens: list[int] = []
    steps: list[int] = []
    for row in rows:
        verify = row.get("spec_verify_ct") if isinstance(row, dict) else None
        completion = row.get("completion_tokens") if isinstance(row, dict) else None
        if not _count(verify) or not _count(completion):
            raise NotComparable(
                f"benchmark {name}, config {label}: a prompt has no token or verify-step count (the server "
                "did not report spec_verify_ct, or the request failed), so its accept length is unknown"
            )
        tokens.append(completion)
        steps.append(verify)
    return Counts(tokens, steps)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _config(label: str, a: Counts, b: Counts, rng: random.Random) -> dict[str, Any]:
    prompts = range(len(a.tokens))
    accept_a, accept_b = a.pooled(prompts), b.pooled(prompts)
    if len(prompts) <= BOOTSTRAP_UP_TO:
        low, high = _bootstrap(a, b, rng)
    else:
        low, high = _delta_method(a, b, accept_a - accept_b)
    per_prompt = [a.pooled([i]) - b.pooled([i]) for i in prompts]
    return {
        "config": label,
        "a_accept_len": round(accept_a, 4),
        "b_accept_len": round(accept_b, 4),
        "difference": round(accept_a - accept_b, 4),
        "ratio": round(accept_a / accept_b, 4) if accept_b else None,
        "ci_low": round(low, 4),
        "ci_high": round(high, 4),
        "a_ahead_prompts": sum(d > 0 for d in per_prompt),
        "b_ahead_prompts": sum(d < 0 for d in per_prompt),
        "tied_prompts": sum(d == 0 for d in per_prompt),
        "verdict": _verdict(low, high),
    }


def _rows(a: Counts, b: Counts) -> list[tuple[int, int, int, int]]:
    """One row per prompt: a's tokens and steps, b's tokens and steps."""
    return list(zip(a.tokens, a.steps, b.tokens, b.steps, strict=True))


def _difference(sums: Sequence[float]) -> float:
    """Pooled accept length of a minus b's from the columns' sums (0 for a side with no step)."""
    tokens_a, steps_a, tokens_b, steps_b = sums
    return (tokens_a / steps_a if steps_a else 0.0) - (tokens_b / steps_b if steps_b else 0.0)


def _bootstrap(a: Counts, b: Counts, rng: random.Random) -> tuple[float, float]:
    """The percentile interval of the pooled difference over RESAMPLES resamples of prompts, the same
    prompts drawn for both drafts."""
    return percentile_bootstrap(_rows(a, b), _difference, rng)


def _delta_method(a: Counts, b: Counts, difference: float) -> tuple[float, float]:
    """The normal interval of Ta/Sa - Tb/Sb from its linearisation over prompts."""
    if not sum(a.steps) or not sum(b.steps):
        return difference, difference
    return delta_interval(_rows(a, b), _difference)


def _verdict(low: float, high: float) -> str:
    interval = f"{CONFIDENCE:.0%} interval {low:+.3f} to {high:+.3f}"
    if low > 0:
        return f"a accepts more ({interval})"
    if high < 0:
        return f"b accepts more ({interval})"
    return f"no difference these prompts can show ({interval} spans zero)"
