"""torch.compile where it pays (CUDA), eager elsewhere, and never a crash because a compiler is missing."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch


class CompiledOnCuda:
    """Calls `fn` compiled when its first tensor argument is on a GPU, eagerly otherwise.

    Inside an outer `torch.compile` region the plain function is traced instead (nesting compiled callables
    breaks graphs). If compiling fails (no Triton, an unsupported op), it warns once and stays eager:
    slower, never wrong. Out-of-memory errors are not compile failures and propagate.
    """

    def __init__(self, fn: Callable[..., Any], **compile_options: Any) -> None:
        self.fn = fn
        self._options = compile_options
        self._compiled: Callable[..., Any] | None = None
        self._failed = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is None or not first.is_cuda or self._failed or torch.compiler.is_compiling():
            return self.fn(*args, **kwargs)
        if self._compiled is None:
            self._compiled = torch.compile(self.fn, **self._options)
        try:
            return self._compiled(*args, **kwargs)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - compiler failures come in many types; the eager path is always valid
            warnings.warn(f"torch.compile of {self.fn.__name__} failed, running eagerly: {exc}", stacklevel=2)
            self._failed = True
            return self.fn(*args, **kwargs)
