"""Doctor check: the dtype SGLang builds the draft in, against the weights' dtype and the target's.

SGLang builds the draft in its own config's dtype (float32 or no dtype becomes float16 under the default
`--dtype auto`), not in the target's; a draft built in another dtype than the target dies at the first
request in its fc (`expected mat1 and mat2 to have the same dtype`), after startup looked healthy.
"""

from __future__ import annotations

from collections.abc import Iterator

from drafting.checkpoint.dtypes import HALF_PRECISION, weights_dtype
from drafting.checkpoint.view import DraftView
from drafting.findings import Finding, Severity

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 - reads like the report


def _stated(view: DraftView) -> str:
    stated = view.reading.stated_dtype
    if stated is None:
        return "config.json states no dtype (SGLang reads that as float32 and serves float32 in float16)"
    return f"config.json states {stated!r}"


def _fix(dtype: str) -> str:
    return (
        f'set "torch_dtype": "{dtype}" (and "dtype", which readers prefer) in config.json, '
        "or run `eyas fix-keys SRC DST --target TARGET`"
    )


def check_serving_dtype(view: DraftView) -> Iterator[Finding]:
    reading, target = view.reading, view.target_reading
    if reading.rejected:
        yield Finding(
            E,
            "CONFIG_REJECTED",
            f"SGLang reads config.json with transformers' AutoConfig, which refuses it: {reading.rejected}",
            "make the config valid for its model_type (rope fields are a common cause), or run eyas fix-keys",
        )
    stored = weights_dtype({n: e for n, e in view.tensors.items() if view.placements[n].kind == "param"})
    yield Finding(
        I,
        "SGLANG_DTYPE",
        f"SGLang builds the draft in {reading.dtype} (context {reading.context_length}); {_stated(view)}; "
        f"weights stored in {stored or 'no float dtype'}"
        + (f"; target served in {target.dtype}" if target else "")
        + f" [derived by {reading.reader}]",
    )
    if target is not None and reading.dtype != target.dtype:
        yield Finding(
            E,
            "DTYPE_MISMATCH",
            f"SGLang builds the draft in {reading.dtype} but the target in {target.dtype} ({_stated(view)}): "
            "the target's hidden states enter the draft's fc in the target's dtype and the first request "
            "fails with 'expected mat1 and mat2 to have the same dtype'",
            _fix(target.dtype),
        )
        return
    if stored in HALF_PRECISION and stored != reading.dtype:
        if target is not None:  # built in the target's dtype, as it must be: the cast is the price
            yield Finding(
                W,
                "DTYPE_CAST",
                f"weights stored in {stored} are cast to {reading.dtype} (the target's dtype) on load",
                f"retrain or export in {reading.dtype} if the cast costs acceptance",
            )
            return
        yield Finding(
            E,
            "DTYPE_MISMATCH",
            f"SGLang builds the draft in {reading.dtype} but its weights are {stored} ({_stated(view)}): a "
            f"{stored} target crashes at the first request, and any target gets the weights cast",
            _fix(stored) + " (the target's dtype, if you pass one)",
        )
        return
    if target is None and reading.stated_dtype not in HALF_PRECISION:
        yield Finding(
            W,
            "DTYPE_UNCHECKED",
            f"SGLang builds the draft in {reading.dtype} ({_stated(view)}, weights {stored}); unless the "
            f"target is served in {reading.dtype} too, the first request fails",
            "pass --target so the doctor can compare, and state the target's dtype in config.json "
            "(`eyas fix-keys --target` writes it)",
        )


DTYPE_CHECKS = (check_serving_dtype,)
