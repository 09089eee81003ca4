"""The speculative shape (steps, topk, draft tokens) from a launch spec, with findings for what is off."""

from __future__ import annotations

from dataclasses import dataclass

from contract.params.launch import LaunchParams
from drafting.findings import Finding, error, info, warning

DEFAULT_DEPTH = 3


@dataclass(frozen=True)
class SpecShape:
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int

    @property
    def is_chain(self) -> bool:
        return self.eagle_topk == 1

    @classmethod
    def chain(cls, depth: int) -> SpecShape:
        return cls(depth, 1, depth + 1)


def resolve_spec_shape(params: LaunchParams) -> tuple[SpecShape | None, list[Finding]]:
    """The shape to render (None: no speculation, or a shape that cannot be rendered)."""
    explicit = (params.num_steps, params.eagle_topk, params.num_draft_tokens)
    given = [value is not None for value in explicit]
    if params.draft is None:
        if params.depth is not None or any(given):
            return None, [_shape_without_draft()]
        return None, []
    if params.depth is not None and any(given):
        return None, [_depth_and_explicit()]
    if any(given) and not all(given):
        return None, [_partial_shape(params)]
    if params.depth is not None:
        return SpecShape.chain(params.depth), []
    if not any(given):
        return SpecShape.chain(DEFAULT_DEPTH), [_default_depth()]
    steps, topk, tokens = (value for value in explicit if value is not None)
    return _checked_explicit(steps, topk, tokens)


def _checked_explicit(steps: int, topk: int, tokens: int) -> tuple[SpecShape | None, list[Finding]]:
    if topk == 1 and tokens != steps + 1:
        message = (
            f"with eagle_topk 1 SGLang forces num_draft_tokens to num_steps + 1 = {steps + 1} (not {tokens})"
        )
        finding = warning(
            "DRAFT_TOKENS_ADJUSTED", message, f"set num_draft_tokens {steps + 1}, or use depth {steps}"
        )
        return SpecShape.chain(steps), [finding]
    candidates = topk + (steps - 1) * topk * topk
    if topk > 1 and tokens - 1 > candidates:
        message = (
            f"num_draft_tokens {tokens} needs {tokens - 1} tree candidates, but steps {steps} × topk {topk} "
            f"yields at most {candidates}; SGLang does not check this and fails at run time (torch.topk)"
        )
        return None, [error("DRAFT_TOKENS_EXCEED_TREE", message, f"use num_draft_tokens ≤ {candidates + 1}")]
    return SpecShape(steps, topk, tokens), []


def _shape_without_draft() -> Finding:
    return error(
        "SPEC_WITHOUT_DRAFT",
        "depth or steps/topk/draft tokens are set but no draft is given",
        "set `draft` to the drafter folder, or drop the speculative fields for a baseline server",
    )


def _depth_and_explicit() -> Finding:
    return error(
        "SPEC_DEPTH_AND_EXPLICIT",
        "both depth and explicit num_steps/eagle_topk/num_draft_tokens are set",
        "give depth k (renders k, 1, k+1) or the explicit three, not both",
    )


def _partial_shape(params: LaunchParams) -> Finding:
    given = {
        "num_steps": params.num_steps,
        "eagle_topk": params.eagle_topk,
        "num_draft_tokens": params.num_draft_tokens,
    }
    missing = [name for name, value in given.items() if value is None]
    message = (
        f"num_steps/eagle_topk/num_draft_tokens given partly (missing {', '.join(missing)}): SGLang fails "
        "with a bare AssertionError (steps unset) or a TypeError (topk unset) at start-up"
    )
    return error("SPEC_PARAMS_PARTIAL", message, "give all three, or none and set depth k instead")


def _default_depth() -> Finding:
    return info(
        "SPEC_DEPTH_DEFAULT",
        f"no depth given: eyas renders a chain of depth {DEFAULT_DEPTH} (steps {DEFAULT_DEPTH}, topk 1, "
        f"{DEFAULT_DEPTH + 1} draft tokens) instead of letting SGLang pick a shape from the target's "
        "architecture (a 5-step topk-4 tree for Llama)",
        "set depth explicitly",
    )
