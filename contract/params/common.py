"""Building blocks shared by every stage's params."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from contract.params.text import BIDI_CONTROL_RE, NON_FINITE, first_refused

# Characters that have no business in a path eyas hands to a program. No shell ever sees these paths,
# but refusing them at submit time turns a confused or hostile request into a clear 422.
_FORBIDDEN_PATH_CHARS = re.compile(r"[\x00-\x1f\x7f;|&$`<>*?!{}\\\"']")
# C1 controls and line/paragraph separators: invisible, and they break the line a path is shown on.
_INVISIBLE_BREAKS = re.compile("[\x80-\x9f\u2028\u2029]")
MAX_PATH_CHARS = 4096


def _check_host_path(value: str) -> str:
    if len(value) > MAX_PATH_CHARS:
        raise ValueError(f"path is longer than {MAX_PATH_CHARS} characters")
    if not value.startswith("/"):
        raise ValueError("path must be absolute (it is resolved on the worker host)")
    if _FORBIDDEN_PATH_CHARS.search(value) or _INVISIBLE_BREAKS.search(value):
        raise ValueError("path contains control or shell metacharacters")
    if bidi := BIDI_CONTROL_RE.search(value):
        raise ValueError(
            f"path contains the bidirectional text control U+{ord(bidi.group()):04X}, which makes it "
            "display as a different path (a control character)"
        )
    if ".." in PurePosixPath(value).parts:
        raise ValueError("path must not contain '..' components")
    return value


HostPath = Annotated[str, AfterValidator(_check_host_path)]
"""An absolute path on the worker host. The worker also checks it lies under the host's allowed roots."""


def _check_output_path(value: str) -> str:
    return _check_host_path(value)


OutputPath = Annotated[str, AfterValidator(_check_output_path)]
"""A HostPath the stage writes (a folder or file it makes): contract/paths.py says where it may not be."""

# The prompt sets eyas knows by name (drafting.prompting.named holds them; a test keeps the two lists equal).
PROMPT_SET_NAMES = ("default", "mtbench")


def _check_prompt_source(value: str) -> str:
    if value.startswith("/"):
        return _check_host_path(value)
    if value not in PROMPT_SET_NAMES:
        raise ValueError(
            f"prompts must be an absolute path to a JSONL file or a named set "
            f"({', '.join(PROMPT_SET_NAMES)}), not {value[:60]!r}"
        )
    return value


PromptSource = Annotated[str, AfterValidator(_check_prompt_source)]
"""A prompt set: an absolute JSONL path on the worker host (checked like a HostPath, allowed roots included)
or the name of a set eyas ships or installs (PROMPT_SET_NAMES)."""


class StageParams(BaseModel):
    """Base of every stage's params: unknown fields are errors, never silently ignored; a number must be
    finite (NaN or Infinity is refused, never stored as null); and types are strict, as JSON writes them: a
    boolean is not an integer (`"gpus": true`), a string is not a number (`"lr": "1e-4"`) nor a boolean
    (`"compile": "false"`). An integer is still a float's value (`"lr": 1`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        """Every field at any depth: no lone surrogate (pydantic keeps one in a str), no non-finite number."""
        found = first_refused(value)
        if found is not None:
            where, message = found
            kind = "finite_number" if message == NON_FINITE else "string_unicode"
            at = f" at {'.'.join(where)}" if where else ""
            raise PydanticCustomError(kind, "{message}{at}", {"message": message, "at": at})
        return value

    def host_paths(self) -> list[str]:
        """Every HostPath-typed value, so the API and the worker can check them against allowed roots."""
        paths: list[str] = []
        for name, field in type(self).model_fields.items():
            if _is_host_path(field.annotation, field.metadata):
                value = getattr(self, name)
                if isinstance(value, str) and value.startswith("/"):  # a PromptSource may be a set's name
                    paths.append(value)
        return paths

    def output_paths(self) -> list[str]:
        """Every OutputPath-typed value: what the job writes (the rest of host_paths it only reads)."""
        return [
            value
            for name, field in type(self).model_fields.items()
            if _is_host_path(field.annotation, field.metadata, (_check_output_path,))
            and isinstance(value := getattr(self, name), str)
        ]

    def needs_gpus(self) -> bool:
        """Whether this job holds GPUs while it runs (overridden by GPU stages)."""
        return False

    def gpus_optional(self) -> bool:
        """Whether the stage can run without GPUs when the host has none (e.g. a launch with engine auto)."""
        return False

    def gpus_needed(self) -> int:
        """How many GPUs the job leases when the request does not say (a server: its tensor-parallel size)."""
        return 1 if self.needs_gpus() else 0

    def gpus_conflict(self, gpus: int) -> str | None:  # noqa: ARG002 - overridden by stages whose paths depend on the GPUs
        """Why a request for `gpus` GPUs contradicts these params (None when it does not)."""
        return None


class DataParallelParams(StageParams):
    """Params of a stage that can run as several torchrun ranks: one per GPU, or gloo processes on CPU."""

    device: Literal["cuda", "cpu"] = Field(
        "cuda", description="cuda runs on the job's leased GPUs, one rank per GPU"
    )
    ranks: int | None = Field(
        None,
        ge=1,
        le=64,
        description="data-parallel processes (torchrun). cuda: one per GPU, default all the job's GPUs "
        "(leases this many when the request names no gpus). cpu: gloo processes, default 1",
    )

    def needs_gpus(self) -> bool:
        return self.device == "cuda"

    def gpus_needed(self) -> int:
        return (self.ranks or 1) if self.device == "cuda" else 0

    def gpus_conflict(self, gpus: int) -> str | None:
        if self.device == "cuda" and self.ranks is not None and gpus != self.ranks:
            return f"ranks is {self.ranks} but the job asks for {gpus} GPU(s): on cuda a rank runs on one GPU"
        return None


_PATH_CHECKS = (_check_host_path, _check_prompt_source, _check_output_path)


def _is_host_path(annotation: object, metadata: list[object], checks: tuple[Any, ...] = _PATH_CHECKS) -> bool:
    validators = [m for m in metadata if isinstance(m, AfterValidator)]
    if any(v.func in checks for v in validators):
        return True
    args = getattr(annotation, "__args__", ())
    for arg in args:
        for meta in getattr(arg, "__metadata__", ()):
            if isinstance(meta, AfterValidator) and meta.func in checks:
                return True
    return False
