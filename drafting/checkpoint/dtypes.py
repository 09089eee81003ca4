"""The draft's dtype three ways: what its weights are stored in, what its config states, what SGLang builds.

SGLang casts every weight to the dtype it builds the model in (the weight loaders copy into parameters of
that dtype), so the stored dtype only has to be castable; the built dtype must equal the target's, because
the target's hidden states go straight into the draft's fc. See sglang_reading for how the built dtype is
derived, and docs/checkpoint.md for the decisions taken here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drafting.checkpoint.safetensors_io import FLOAT_DTYPES, TensorEntry
from drafting.checkpoint.sglang_reading import read_as_sglang, stated_dtype
from drafting.checkpoint.target import TargetModel

TORCH_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}
HALF_PRECISION = ("bfloat16", "float16")
DTYPE_KEYS = (
    "torch_dtype",
    "dtype",
)  # transformers < 4.56 reads the first, 5.x and SGLang's dict path the second


def weights_dtype(tensors: Mapping[str, TensorEntry]) -> str | None:
    """The torch name of the float dtype holding most of the weights' bytes (None without float weights)."""
    totals: dict[str, int] = {}
    for entry in tensors.values():
        if entry.dtype in FLOAT_DTYPES:
            totals[entry.dtype] = totals.get(entry.dtype, 0) + entry.nbytes
    if not totals:
        return None
    dominant = max(totals, key=lambda name: totals[name])
    return TORCH_NAMES.get(dominant, dominant.lower())


def target_serving_dtype(target: TargetModel) -> str:
    """The dtype SGLang runs the target in (with --dtype auto)."""
    return read_as_sglang(target.serving_config).dtype


def dtype_for_config(
    source_config: Mapping[str, Any], tensors: Mapping[str, TensorEntry], target: TargetModel | None
) -> tuple[str | None, str]:
    """The dtype a converted config must state, and why; None when nothing can be decided.

    1. With a target: the target's serving dtype. SGLang builds the draft in its own config's dtype, and a
       draft dtype other than the target's crashes at the first request; fp32 or fp16 weights are cast to
       it on load.
    2. Without one: the weights' dtype when it is bf16 or fp16 (trainers save in the target's dtype).
    3. fp32 weights and no target: the 16-bit dtype the source config states, if any. Otherwise nothing
       is invented: the doctor warns that SGLang would build the draft in float16.
    """
    if target is not None:
        return target_serving_dtype(target), "the target's serving dtype; SGLang casts the weights to it"
    stored = weights_dtype(tensors)
    if stored in HALF_PRECISION:
        return stored, "the weights' dtype"
    stated = stated_dtype(source_config)
    if stated in HALF_PRECISION:
        return stated, "the dtype the source config states"
    return None, ""
