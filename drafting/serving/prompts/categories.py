"""Acceptance broken down by prompt category (MT-Bench: writing, roleplay, reasoning, math, coding, …).

Acceptance differs a lot by kind of text (code and math accept longer drafts than open writing), so a set
with categories reports each one beside the total. Per category, as for the whole set:
`accept_length_meta` = Σ completion tokens / Σ verify steps (meta_info's, what SGLang's benchmark reports),
and where the accepted drafts per step are known (eval), `accept_length` = Σ(accepted + 1) / Σ verify steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drafting.serving.prompts import set_summary


@dataclass(frozen=True)
class PromptTally:
    category: str | None
    completion_tokens: int
    verify_steps: int | None  # None: the server did not report spec_verify_ct
    accepted_drafts: int | None = None  # Σ drafts accepted over the prompt's steps (eval only)


def by_category(tallies: Sequence[PromptTally]) -> dict[str, dict[str, Any]] | None:
    """{category: {prompts, completion_tokens, verify_steps, accept_length_meta[, accept_length]}}, in order
    of first appearance; None when no prompt has a category."""
    if not any(t.category for t in tallies):
        return None
    groups: dict[str, list[PromptTally]] = {}
    for tally in tallies:
        groups.setdefault(tally.category or "(none)", []).append(tally)
    return {name: _row(group) for name, group in groups.items()}


def _row(group: list[PromptTally]) -> dict[str, Any]:
    counted = [t for t in group if t.verify_steps]
    verify = sum(t.verify_steps or 0 for t in counted)
    completion = sum(t.completion_tokens for t in counted)
    row: dict[str, Any] = {
        "prompts": len(group),
        "completion_tokens": sum(t.completion_tokens for t in group),
        "verify_steps": verify,
        "accept_length_meta": round(completion / verify, 4) if verify else None,
    }
    if counted and all(t.accepted_drafts is not None for t in counted):
        accepted = sum(t.accepted_drafts or 0 for t in counted)
        row["accept_length"] = round((accepted + verify) / verify, 4)
    return row


def request_tallies(categories: Sequence[str | None], records: Sequence[Any]) -> list[PromptTally]:
    """A benchmark's per-request counts (load_client.RequestRecord: completion_tokens, spec_verify_ct)."""
    return [
        PromptTally(category, int(record.completion_tokens), record.spec_verify_ct)
        for category, record in zip(categories, records, strict=True)
    ]


def benchmark_prompt_report(
    source: str | None,
    prompts: Sequence[Any],
    records: Sequence[Any] | None = None,
    raw_text_note: str | None = None,
    requests_digest: str | None = None,
) -> dict[str, Any]:
    """What a benchmark result says about its prompts: the set, chat or raw, which turns were asked and the
    digest of the requests sent (`prompt_set`), and with per-request records, meta_info's accept length per
    category (`by_category`)."""
    report: dict[str, Any] = {"prompt_set": set_summary(source, prompts, raw_text_note)}
    if requests_digest is not None:
        report["prompt_set"]["requests_digest"] = requests_digest
    if records is not None:
        categories = by_category(request_tallies([p.category for p in prompts], records))
        if categories is not None:
            report["by_category"] = categories
    return report
