"""Building blocks shared by every stage's params."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

# Characters that have no business in a path eyas hands to a program. No shell ever sees these paths,
# but refusing them at submit time turns a confused or hostile request into a clear 422.
_FORBIDDEN_PATH_CHARS = re.compile(r"[\x00-\x1f\x7f;|&$`<>*?!{}\\\"']")
MAX_PATH_CHARS = 4096


def _check_host_path(value: str) -> str:
    if len(value) > MAX_PATH_CHARS:
        raise ValueError(f"path is longer than {MAX_PATH_CHARS} characters")
    if not value.startswith("/"):
        raise ValueError("path must be absolute (it is resolved on the worker host)")
    if _FORBIDDEN_PATH_CHARS.search(value):
        raise ValueError("path contains control or shell metacharacters")
    if ".." in PurePosixPath(value).parts:
        raise ValueError("path must not contain '..' components")
    return value


HostPath = Annotated[str, AfterValidator(_check_host_path)]
"""An absolute path on the worker host. The worker also checks it lies under the host's allowed roots."""


class StageParams(BaseModel):
    """Base of every stage's params: unknown fields are errors, never silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def host_paths(self) -> list[str]:
        """Every HostPath-typed value, so the API and the worker can check them against allowed roots."""
        paths: list[str] = []
        for name, field in type(self).model_fields.items():
            if _is_host_path(field.annotation, field.metadata):
                value = getattr(self, name)
                if isinstance(value, str):
                    paths.append(value)
        return paths

    def needs_gpus(self) -> bool:
        """Whether this job holds GPUs while it runs (overridden by GPU stages)."""
        return False

    def gpus_optional(self) -> bool:
        """Whether the stage can run without GPUs when the host has none (e.g. a launch with engine auto)."""
        return False

    def gpus_needed(self) -> int:
        """How many GPUs the job leases when the request does not say (a server: its tensor-parallel size)."""
        return 1 if self.needs_gpus() else 0

    def gpus_conflict(self, gpus: int) -> str | None:
        """Why a request for `gpus` GPUs contradicts these params (None when it does not)."""
        return None


def _is_host_path(annotation: object, metadata: list[object]) -> bool:
    validators = [m for m in metadata if isinstance(m, AfterValidator)]
    if any(v.func is _check_host_path for v in validators):
        return True
    args = getattr(annotation, "__args__", ())
    for arg in args:
        for meta in getattr(arg, "__metadata__", ()):
            if isinstance(meta, AfterValidator) and meta.func is _check_host_path:
                return True
    return False
