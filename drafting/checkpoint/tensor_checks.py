"""Doctor checks of tensor names, shapes, the d2t map, dtypes and size (headers, plus d2t's values)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import numpy as np

from drafting.checkpoint.layout import STACKED_PARTS, resolve_name
from drafting.checkpoint.safetensors_io import FLOAT_DTYPES, INTEGER_DTYPES, read_bytes
from drafting.checkpoint.view import DraftView
from drafting.findings import Finding, Severity
from drafting.sglang_facts import DRAFT_WEIGHT_ROOTS, TRAINER_PREFIXES, UNUSED_BY_SGLANG

FIX_KEYS = "run `eyas fix-keys SRC DST --target TARGET`"
E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 - reads like the report
_MB = 1024 * 1024
_D2T_MAX_ELEMENTS = 16 * 1024 * 1024  # read the map's values only when it is map-sized
_NUMPY_INTEGERS = {
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1",
}  # fmt: skip


def strip_trainer_prefixes(name: str) -> str:
    """Remove wrapper prefixes (`draft_model.`, `module.`, ...) however deep they are stacked."""
    changed = True
    while changed:
        changed = False
        for prefix in TRAINER_PREFIXES:
            if name.startswith(prefix) and len(name) > len(prefix):
                name, changed = name[len(prefix) :], True
    return name


def _is_draft_weight(name: str) -> bool:
    return name.split(".", 1)[0] in DRAFT_WEIGHT_ROOTS


def check_names(view: DraftView) -> Iterator[Finding]:
    """Names SGLang would drop without a word: trainer prefixes, layers.0 on old releases, strays."""
    prefixed, lost, clutter = [], [], []
    for name, placement in view.placements.items():
        if placement.kind != "ignored":
            continue
        bare = strip_trainer_prefixes(name)
        if bare != name and resolve_name(bare, view.rules, view.params).kind != "ignored":
            prefixed.append(name)
        elif _is_draft_weight(bare):
            lost.append(name)
        elif bare not in UNUSED_BY_SGLANG:
            clutter.append(name)
    if prefixed:
        yield Finding(
            E,
            "TRAINER_PREFIX",
            f"{len(prefixed)} tensors carry a trainer prefix; SGLang does not strip it and drops them",
            FIX_KEYS + " (strips the prefix)",
            tuple(prefixed),
        )
    if lost:
        yield Finding(E, "TENSOR_IGNORED", _lost_message(view, lost), FIX_KEYS, tuple(lost))
    if clutter:
        yield Finding(
            W,
            "TENSOR_IGNORED",
            f"{len(clutter)} tensors SGLang does not use (dropped silently; only disk and load time)",
            FIX_KEYS + " (drops them)",
            tuple(clutter),
        )


def _lost_message(view: DraftView, lost: list[str]) -> str:
    if view.rules.layer_module == "midlayer" and any(n.startswith("layers.0.") for n in lost):
        return (
            f"{len(lost)} draft weights SGLang {view.version} silently drops: it names the decoder layer "
            "`midlayer.*`, so `layers.0.*` never loads and the layer keeps random weights (acceptance ~1.0)"
        )
    return f"{len(lost)} draft weights SGLang {view.version} has no parameter for; they are dropped silently"


def check_coverage(view: DraftView) -> Iterator[Finding]:
    """Every parameter SGLang needs is loaded exactly once, with the shape it builds."""
    loaded: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, placement in view.placements.items():
        if placement.kind == "param" and placement.param is not None:
            loaded[(placement.param, placement.shard)].append(name)
    missing = [
        checkpoint_key(param.name, shard)
        for param in view.params.values()
        if param.required
        for shard in param.shards
        if (param.name, shard) not in loaded
    ]
    if missing:
        yield Finding(
            E,
            "TENSOR_MISSING",
            f"{len(missing)} weights SGLang needs are not in the checkpoint; they would stay random",
            "re-export the draft with every weight (or fix the names: " + FIX_KEYS + ")",
            tuple(missing),
        )
    duplicated = [names for names in loaded.values() if len(names) > 1]
    if duplicated:
        yield Finding(
            E,
            "TENSOR_DUPLICATE",
            f"{len(duplicated)} parameters are loaded from several tensors; the last one read wins",
            "keep one copy of each (" + FIX_KEYS + ")",
            tuple(n for names in duplicated for n in names),
        )
    yield from _check_shapes(view, loaded)


def checkpoint_key(param: str, shard: str) -> str:
    """The checkpoint name that fills one parameter shard, in the portable (`midlayer.`) layout."""
    name = param.removeprefix("model.").replace("layers.0.", "midlayer.")
    for fused, part, shard_id in STACKED_PARTS:
        if shard == shard_id and fused in name:
            return name.replace(fused, part)
    return name


def _check_shapes(view: DraftView, loaded: dict[tuple[str, str], list[str]]) -> Iterator[Finding]:
    for (param_name, shard), names in sorted(loaded.items()):
        expected = view.params[param_name].shards[shard]
        for name in names:
            actual = view.tensors[name].shape
            if actual != expected:
                yield _shape_finding(view, name, param_name, actual, expected)


def _shape_finding(
    view: DraftView, name: str, param: str, actual: tuple[int, ...], expected: tuple[int, ...]
) -> Finding:
    spec = view.spec
    assert spec is not None
    fix = "SGLang fails to start (weight loader size assert); check the config against the checkpoint"
    if param == "model.fc.weight":
        target = view.target.hidden_size if view.target else spec.target_hidden
        return Finding(
            E,
            "FC_SHAPE",
            f"{name} is {list(actual)}; SGLang builds fc as [H, K*T] = {list(expected)} "
            f"(H={spec.hidden}, K={spec.num_aux} aux layers, T={spec.target_hidden}; target hidden {target})",
            "set target_hidden_size / aux layer ids to what the draft was trained with, or use its target",
            (name,),
        )
    if ".qkv_proj." in param and len(actual) == 2 and actual[1] != expected[1]:
        return Finding(
            E,
            "QKV_INPUT",
            f"{name} takes {actual[1]} inputs; the first layer's q/k/v read cat(embeds, hidden) = "
            f"2*H = {expected[1]}",
            fix,
            (name,),
        )
    if param == "lm_head.weight":
        return Finding(
            E,
            "LM_HEAD_SHAPE",
            f"{name} is {list(actual)}; SGLang builds [draft_vocab_size, H] = {list(expected)}",
            f"set draft_vocab_size to {actual[0]} if that is the draft vocabulary" if actual else fix,
            (name,),
        )
    return Finding(E, "SHAPE", f"{name} is {list(actual)}; SGLang builds {list(expected)}", fix, (name,))


def check_embedding(view: DraftView) -> Iterator[Finding]:
    spec = view.spec
    if spec is None or not spec.embed_shared_with_target:
        return
    carried = [n for n, p in view.placements.items() if p.param == "model.embed_tokens.weight"]
    if carried:
        size = sum(view.tensors[n].nbytes for n in carried)
        yield Finding(
            W,
            "EMBED_CARRIED",
            f"embed_tokens ({size / _MB:.1f} MiB) is carried for nothing: SGLang replaces it with the "
            "target's embedding (draft and target hidden sizes are equal)",
            FIX_KEYS + " (drops it)",
            tuple(carried),
        )


def check_d2t(view: DraftView) -> Iterator[Finding]:
    spec = view.spec
    maps = [n for n, p in view.placements.items() if p.kind == "d2t"]
    if spec is None:
        return
    if not maps:
        if spec.draft_vocab < spec.vocab and not spec.tie_embeddings:
            yield Finding(
                E,
                "TENSOR_MISSING",
                f"no d2t although draft_vocab_size {spec.draft_vocab} < vocab_size {spec.vocab}: SGLang "
                "would read draft ids as target ids 0..N-1 and acceptance collapses",
                "add the d2t map the draft was trained with",
                ("d2t",),
            )
        return
    entry = view.tensors[maps[0]]
    if entry.dtype not in INTEGER_DTYPES:
        yield Finding(
            E,
            "D2T_DTYPE",
            f"{entry.name} is {entry.dtype}; SGLang adds it to arange() and indexes with it, so it must "
            "hold integers (int64 offsets)",
            "save d2t as int64",
            (entry.name,),
        )
        return
    if entry.shape != (spec.draft_vocab,):
        yield Finding(
            E,
            "D2T_SHAPE",
            f"{entry.name} has shape {list(entry.shape)}; it must be [draft_vocab_size] [{spec.draft_vocab}]",
            "use the d2t map saved with this lm_head",
            (entry.name,),
        )
        return
    yield from _d2t_range(view, entry.name)


def _d2t_range(view: DraftView, name: str) -> Iterator[Finding]:
    entry = view.tensors[name]
    if entry.numel > _D2T_MAX_ELEMENTS:
        return
    offsets = np.frombuffer(read_bytes(entry), dtype=_NUMPY_INTEGERS[entry.dtype]).astype(np.int64)
    target_ids = offsets + np.arange(offsets.size, dtype=np.int64)
    vocab = view.target.vocab_size if view.target else view.spec.vocab if view.spec else 0
    outside = int(np.count_nonzero((target_ids < 0) | (target_ids >= vocab)))
    if outside:
        yield Finding(
            E,
            "D2T_RANGE",
            f"{outside} draft tokens map outside the target vocabulary [0, {vocab}) "
            "(target id = draft id + d2t[draft id])",
            "rebuild d2t as offsets (used_ids[i] - i) for this target's tokenizer",
            (name,),
        )
    elif np.unique(target_ids).size != target_ids.size:
        yield Finding(
            W,
            "D2T_RANGE",
            "several draft tokens map to the same target token (d2t holds ids, not offsets?)",
            "d2t must hold offsets: used_ids[i] - i",
            (name,),
        )


def check_dtypes_and_size(view: DraftView) -> Iterator[Finding]:
    weights = {n: e for n, e in view.tensors.items() if view.placements[n].kind == "param"}
    not_float = sorted(n for n, e in weights.items() if e.dtype not in FLOAT_DTYPES)
    if not_float:
        yield Finding(
            E,
            "DTYPE",
            "weights stored as integers or bool: SGLang would load raw values into float parameters",
            "save the draft in bf16/fp16 (quantized drafts are not supported here)",
            tuple(not_float),
        )
    floats = sorted({e.dtype for e in weights.values() if e.dtype in FLOAT_DTYPES})
    if "F32" in floats:
        yield Finding(
            W,
            "DTYPE",
            f"weights in {'/'.join(floats)}: SGLang casts to the serving dtype",
            "save in bf16 to halve the size",
        )
    elif floats:
        target = f" (target: {view.target.dtype})" if view.target and view.target.dtype else ""
        yield Finding(I, "DTYPE", f"weights in {'/'.join(floats)}{target}")
    total = sum(e.nbytes for e in view.tensors.values())
    params = sum(e.numel for e in weights.values())
    yield Finding(
        I, "TOTAL_SIZE", f"{len(view.tensors)} tensors, {total / _MB:.1f} MiB, {params:,} loaded parameters"
    )


TENSOR_CHECKS = (check_names, check_coverage, check_embedding, check_d2t, check_dtypes_and_size)
