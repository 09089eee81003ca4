"""SGLang's own `set_eagle3_layers_to_capture`, compiled from a release's model sources and run on stubs.

No sglang import (it needs CUDA-era dependencies): the method's source is all that decides which layers a
draft config's ids capture, and it only reads a few attributes of the model, given here.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from drafting.support_matrix.scan import CAPTURE_METHOD


def _model_stub(num_layers: int) -> SimpleNamespace:
    stub = SimpleNamespace(layers_to_capture=None, capture_aux_hidden_states=False)
    stub.layers = [SimpleNamespace() for _ in range(num_layers)]

    def set_layers(layers: list[int]) -> None:  # the inner models' setter (qwen2_moe, qwen3_next, …)
        stub.layers_to_capture = list(layers)

    stub.set_eagle3_layers_to_capture = set_layers
    return stub


def _sglang_method(models: Path, hook: str) -> Any:
    """`hook`'s set_eagle3_layers_to_capture compiled from the release's source (no sglang import)."""
    module, cls = hook.split(".")
    tree = ast.parse((models / f"{module}.py").read_text(encoding="utf-8-sig"))
    owner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    method = next(n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == CAPTURE_METHOD)
    last_rank = SimpleNamespace(is_last_rank=True)
    names: dict[str, Any] = {
        "Optional": Optional,
        "List": list,
        "get_pp_group": lambda: last_rank,
        "get_parallel": lambda: SimpleNamespace(pp_group=last_rank),
    }
    # SGLang's own method, read from its installed files, run on stubs
    exec(compile(ast.Module(body=[method], type_ignores=[]), f"{module}.py", "exec"), names)
    return names[CAPTURE_METHOD]


def _self_stub(models: Path, rules: dict[str, Any], hook: str, num_layers: int) -> SimpleNamespace:
    config = SimpleNamespace(
        num_hidden_layers=num_layers, text_config=SimpleNamespace(num_hidden_layers=num_layers)
    )
    stub = SimpleNamespace(
        pp_group=SimpleNamespace(is_last_rank=True), config=config, model=_model_stub(num_layers)
    )
    delegate = rules[hook].get("delegates_to")
    if delegate is None:
        stub.language_model = _model_stub(num_layers)
        return stub
    inner = _self_stub(models, rules, delegate, num_layers)
    method = _sglang_method(models, delegate)
    stub.language_model = SimpleNamespace(
        set_eagle3_layers_to_capture=lambda ids=None: method(inner, ids), model=inner.model
    )
    return stub


def _captured(stub: SimpleNamespace) -> list[int]:
    for holder in (stub.model, stub.language_model, getattr(stub.language_model, "model", None)):
        layers = getattr(holder, "layers_to_capture", None)
        if layers is not None:
            return list(layers)
    raise AssertionError("the method set no layers_to_capture")


def sglang_layers_to_capture(
    models: Path, rules: dict[str, Any], hook: str, ids: list[int] | None, num_layers: int
) -> list[int]:
    """The `layers_to_capture` the release's `hook` class sets for `ids` (delegations followed)."""
    stub = _self_stub(models, rules, hook, num_layers)
    _sglang_method(models, hook)(stub, ids)
    return _captured(stub)
