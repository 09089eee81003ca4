"""The real SmolLM2-135M-Instruct target for tests, built once from the installed package's GGUF.

Built into a folder under the system temp dir named by the GGUF's sha256, so a test session builds it once
(~1 minute on 2 cores) and later sessions find it cached (the builder re-checks it, ~1 s). Tests using it are
marked `realmodel` (in the default test command; `-m "not realmodel"` leaves them out of a quick run).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest

from drafting.realmodels.gguf_build import file_identity
from drafting.realmodels.smollm2 import build_smollm2, packaged_gguf

realmodel = pytest.mark.realmodel


@functools.cache
def gguf_sha256() -> str:
    return str(file_identity(packaged_gguf())["sha256"])


def cache_folder() -> Path:
    return Path(tempfile.gettempdir()) / "eyas-test-targets" / f"smollm2-{gguf_sha256()[:16]}"


@functools.cache
def smollm2_target() -> Path:
    """The built HF folder (once per process; cached across sessions)."""
    return build_smollm2(cache_folder()).folder
