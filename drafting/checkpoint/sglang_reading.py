"""What SGLang makes of a config.json: the dtype it builds the model in, and the context length it derives.

SGLang builds every model, the draft included, in `_get_and_verify_dtype(hf_text_config, server dtype)`
(sglang srt/configs/model_config.py, identical in 0.5.14 and 0.5.23). With the default `--dtype auto` it
takes the config's `dtype` (else `torch_dtype`) and turns float32, or no dtype at all, into float16. The
draft gets its *own* config's dtype, not the target's, so a draft config without a dtype over a bf16 target
builds a float16 draft, and the first request dies in the draft's fc (`expected mat1 and mat2 to have the
same dtype`). The context length is `get_context_length(hf_text_config)`
(srt/utils/hf_transformers/common.py).

Where sglang is installed, those two functions run as the installed release wrote them: their definitions
are taken from its source files and executed over the config as transformers' AutoConfig builds it (what
SGLang's HF config parser does). Importing `sglang.srt.configs.model_config` itself needs SGLang's whole
GPU stack (torchvision, sgl_kernel ...), which an `--no-deps` install on a CPU host lacks. Without sglang,
eyas's own statement of the same rules answers; `SGLangReading.reader` says which one did.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import logging
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from drafting.sglang_facts import context_length as eyas_context_length

# The dtype names SGLang maps (its _STR_DTYPE_TO_TORCH_DTYPE); any other string counts as no dtype.
_SGLANG_DTYPE_NAMES = {
    "half": "float16",
    "float16": "float16",
    "float": "float32",
    "float32": "float32",
    "bfloat16": "bfloat16",
}
# Where each function lives, newest layout first (0.5.14+ moved the HF helpers into a package).
_DTYPE_SOURCE = ("srt/configs/model_config.py", ("_STR_DTYPE_TO_TORCH_DTYPE", "_get_and_verify_dtype"))
_CONTEXT_SOURCES = (
    "srt/utils/hf_transformers/common.py",
    "srt/utils/hf_transformers_utils.py",
    "srt/hf_transformers_utils.py",
)
_CONTEXT_NAMES = ("CONTEXT_LENGTH_KEYS", "get_context_length")


@dataclass(frozen=True)
class SGLangReading:
    """The dtype and context length SGLang derives from one config, and what derived them."""

    dtype: str  # torch's name: "bfloat16", "float16", "float32"
    context_length: int
    stated_dtype: str | None  # what config.json says (`dtype`, else `torch_dtype`); None when silent
    reader: str
    rejected: str | None = None  # why transformers (so SGLang at startup) refuses the config, if it does


def stated_dtype(config: Mapping[str, Any]) -> str | None:
    """The dtype a config states, as SGLang and transformers 5 read it: `dtype` first, then `torch_dtype`."""
    value = config.get("dtype") or config.get("torch_dtype")
    return str(value).removeprefix("torch.") if value else None


def read_as_sglang(config: Mapping[str, Any], server_dtype: str = "auto") -> SGLangReading:
    """How SGLang (installed, else eyas's rules) reads `config`, launched with `--dtype server_dtype`."""
    stated = stated_dtype(config)
    functions = _installed_sglang()
    if functions is not None:
        try:
            dtype, context = functions.read(dict(config), server_dtype)
            return SGLangReading(dtype, context, stated, functions.label)
        except ConfigRejected as exc:
            fallback = _eyas_dtype(config, server_dtype), eyas_context_length(dict(config))
            return SGLangReading(*fallback, stated, functions.label, rejected=str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure of foreign code falls back, and says so
            reader = f"eyas's rules (sglang {functions.version}'s own functions failed: {exc!r:.120})"
            return SGLangReading(
                _eyas_dtype(config, server_dtype), eyas_context_length(dict(config)), stated, reader
            )
    reader = f"eyas's rules ({_why_not_installed()})"
    return SGLangReading(_eyas_dtype(config, server_dtype), eyas_context_length(dict(config)), stated, reader)


def _eyas_dtype(config: Mapping[str, Any], server_dtype: str) -> str:
    """SGLang's _get_and_verify_dtype restated: only `--dtype auto` looks at the config."""
    if server_dtype.lower() != "auto":
        return _SGLANG_DTYPE_NAMES.get(server_dtype.lower(), server_dtype.lower())
    stated = _SGLANG_DTYPE_NAMES.get(stated_dtype(config) or "", "float32")
    if stated != "float32":
        return stated
    # float32 (or silence) is served in half precision: bf16 for Gemma, fp16 for everything else.
    return "bfloat16" if str(config.get("model_type") or "").startswith("gemma") else "float16"


@dataclass(frozen=True)
class _SGLangFunctions:
    version: str
    get_and_verify_dtype: Callable[..., Any]
    get_context_length: Callable[[Any], int]

    @property
    def label(self) -> str:
        return f"sglang {self.version}'s _get_and_verify_dtype and get_context_length (installed)"

    def read(self, config: dict[str, Any], server_dtype: str) -> tuple[str, int]:
        hf_config = _as_transformers_config(config)
        dtype = self.get_and_verify_dtype(hf_config, server_dtype)
        return str(dtype).removeprefix("torch."), int(self.get_context_length(hf_config))


def _as_transformers_config(config: dict[str, Any]) -> Any:
    """The config object SGLang's HF parser gets from AutoConfig for this config.json.

    A model_type transformers does not know (a speculators config has none) leaves the dict itself,
    which _get_and_verify_dtype accepts too; get_context_length reads attributes, hence _DictConfig.
    A config transformers rejects raises ConfigRejected: SGLang's startup would fail the same way.
    """
    from transformers import CONFIG_MAPPING, AutoConfig

    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return _DictConfig(config)
    fields = {k: v for k, v in config.items() if k != "model_type"}
    try:
        return AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # whatever transformers raises, SGLang's get_config raises too
        raise ConfigRejected(f"transformers' {type(exc).__name__}: {exc}") from exc


class ConfigRejected(Exception):
    """transformers refuses to build this config, so SGLang's get_config fails at startup."""


class _DictConfig(dict[str, Any]):
    """A raw config dict that also answers getattr, as a PretrainedConfig would."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc


def _sglang_root() -> Path | None:
    spec = importlib.util.find_spec("sglang")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _why_not_installed() -> str:
    return "sglang is not installed" if _sglang_root() is None else "sglang's functions could not be loaded"


@cache
def _installed_sglang() -> _SGLangFunctions | None:
    root = _sglang_root()
    if root is None:
        return None
    try:
        import torch
        from transformers import PretrainedConfig
    except ImportError:
        return None
    namespace: dict[str, Any] = {
        "torch": torch,
        "PretrainedConfig": PretrainedConfig,
        "logger": logging.getLogger("sglang"),
        **{name: getattr(typing, name) for name in ("Any", "Dict", "List", "Optional", "Tuple", "Union")},
    }
    try:
        _load_definitions(root / _DTYPE_SOURCE[0], _DTYPE_SOURCE[1], namespace)
        context_file = next(root / rel for rel in _CONTEXT_SOURCES if (root / rel).is_file())
        _load_definitions(context_file, _CONTEXT_NAMES, namespace)
        version = importlib.metadata.version("sglang")
    except (
        OSError,
        SyntaxError,
        LookupError,
        StopIteration,
        NameError,
        importlib.metadata.PackageNotFoundError,
    ):
        return None
    return _SGLangFunctions(version, namespace["_get_and_verify_dtype"], namespace["get_context_length"])


def _load_definitions(path: Path, names: tuple[str, ...], namespace: dict[str, Any]) -> None:
    """Execute only the top-level definitions `names` of an SGLang source file into `namespace`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    wanted = [node for node in tree.body if _defined_name(node) in names]
    found = {_defined_name(node) for node in wanted}
    if found != set(names):
        raise LookupError(f"{path}: no {sorted(set(names) - found)}")
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)


def _defined_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None
