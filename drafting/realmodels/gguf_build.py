"""Build an ordinary HF model folder (bf16 safetensors, tokenizer with its chat template, config) from a GGUF
file, once: cached behind a marker, written atomically, checked after.

- **Cached.** The folder holds `eyas-target.json`: the GGUF's name, size and sha256 and the builder's name and
  version. A later build with the same GGUF and builder version re-checks the folder and returns it untouched;
  a different GGUF or a newer builder rebuilds it.
- **Atomic.** The folder is written beside its destination (`drafting.checkpoint.atomic`) and renamed into
  place only once saved and checked, so a killed build leaves nothing half-written at the destination (the
  next build clears the leftovers of dead processes).
- **Checked before.** The GGUF's header (drafting.realmodels.gguf_header) must name the architecture,
  block count, hidden size and vocabulary the recipe expects, and a tied target no `output.weight`, before
  the minutes of conversion start.
- **Checked after.** The saved config is read back the way the doctor reads a target (`load_target`) and
  must match the architecture the builder expects; the weights must hold the embedding and, for a tied
  target, no `lm_head.weight` (tied targets have none: consumers use the embedding); the tokenizer must
  carry a chat template.

transformers reads GGUF itself (`from_pretrained(..., gguf_file=...)`, needing the `gguf` and `accelerate`
packages). Newer transformers keep a quantised GGUF's weights packed unless asked to dequantise; a packed
model cannot be saved, so the build asks for dequantised weights where the option exists.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafting.checkpoint import atomic
from drafting.checkpoint.target import load_target
from drafting.outputs import OutputMark, open_folder, read_mark, write_mark
from drafting.prompting.chat import has_chat_template
from drafting.realmodels.gguf_header import GgufHeader
from drafting.realmodels.gguf_source import GgufSource, SingleGguf, TargetBuildError, file_identity

__all__ = ["BuiltTarget", "Expected", "TargetBuildError", "build_from_gguf", "file_identity", "read_marker"]

MARKER = "eyas-target.json"
_HEAD_NAMES = ("lm_head.weight",)
_EMBED_NAME = "model.embed_tokens.weight"


@dataclass(frozen=True)
class Expected:
    """What the built folder must be: the facts a consumer of this target relies on."""

    architecture: str
    gguf_architecture: str  # general.architecture in the GGUF's header, e.g. "llama", "qwen2"
    num_layers: int
    hidden_size: int
    vocab_size: int
    tied_embeddings: bool


@dataclass(frozen=True)
class BuiltTarget:
    folder: Path
    gguf: str  # the GGUF file built from (its path), or a split GGUF's name
    built: bool  # False: the cached folder was reused
    seconds: float
    marker: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "gguf": self.gguf,
            "built": self.built,
            "seconds": round(self.seconds, 2),
            **self.marker,
        }


def build_from_gguf(
    folder: Path,
    gguf: Path | GgufSource,
    *,
    builder: str,
    version: int,
    expected: Expected,
    dtype: str = "bfloat16",
) -> BuiltTarget:
    """The HF folder of `gguf` (a file, or a source such as a split GGUF) at `folder` (see the module doc);
    TargetBuildError when it cannot be made."""
    started = time.monotonic()
    folder = Path(folder).absolute()
    source = SingleGguf(Path(gguf).absolute()) if isinstance(gguf, str | Path) else gguf
    wanted = {"builder": builder, "builder_version": version, "dtype": dtype, "gguf": source.identity()}
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(folder):
        return _build_locked(folder, source, wanted, expected, dtype, started)


def header_problems(header: GgufHeader, expected: Expected) -> list[str]:
    """What in a GGUF's header differs from what the recipe expects (empty: it is the model expected)."""
    facts = {
        "architecture": (header.architecture, expected.gguf_architecture),
        "block_count": (header.arch_value("block_count"), expected.num_layers),
        "embedding_length": (header.arch_value("embedding_length"), expected.hidden_size),
        "vocabulary (token_embd rows)": (header.vocab_size, expected.vocab_size),
        "tied embeddings (no output.weight)": (not header.has_output_tensor, expected.tied_embeddings),
    }
    return [
        f"{name} is {value}, expected {wanted}" for name, (value, wanted) in facts.items() if value != wanted
    ]


@contextmanager
def _exclusive(folder: Path) -> Iterator[None]:
    """One build of `folder` at a time (two `eyas demo` runs, parallel test sessions): the second waits and
    then finds the first one's folder cached."""
    lock = folder.parent / f".{folder.name}.eyas-lock"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_locked(
    folder: Path, source: GgufSource, wanted: dict[str, Any], expected: Expected, dtype: str, started: float
) -> BuiltTarget:
    with atomic.Destination(folder, OutputMark("gguf_build")) as place:
        place.clean_stale()
        current = read_marker(folder)
        name = str(source.path) if isinstance(source, SingleGguf) else str(wanted["gguf"]["name"])
        if current is not None and _same_build(current, wanted):
            check_target_folder(folder, expected)
            return BuiltTarget(folder, name, False, time.monotonic() - started, current)
        if folder.exists() and current is None and any(folder.iterdir()):
            raise TargetBuildError(
                f"{folder} exists and was not built by eyas (no {MARKER}); pick an empty or new folder"
            )
        if problems := header_problems(source.header(), expected):
            raise TargetBuildError(f"{name}: not the model this target expects: " + "; ".join(problems))
        if current is not None:
            _mark_as_output(place)  # built before output folders carried eyas's output marker
        with place.workspace() as work, source.materialise(work) as gguf:
            out = work / "target"
            _convert(gguf, out, dtype)
            check_target_folder(out, expected)
            marker = {**wanted, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()  # an empty folder made for us: nothing to set aside
            place.mark(out)
            place.move_into_place(out)
    return BuiltTarget(folder, name, True, time.monotonic() - started, marker)


def _mark_as_output(place: atomic.Destination) -> None:
    fd = open_folder(place.parent_fd, place.name)
    if fd is None:
        return
    try:
        if read_mark(fd) is None:
            write_mark(fd, place.output_mark)
    finally:
        os.close(fd)


def read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _same_build(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(current.get(key) == value for key, value in wanted.items())


def _convert(gguf: Path, out: Path, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": gguf.name, "dtype": getattr(torch, dtype)}
    try:  # transformers that keep GGUF weights packed (and cannot save them) take this option
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=gguf.name, dequantize=True)
    except ImportError:  # older transformers always dequantise on load
        pass
    # a GGUF carries no code; trust_remote_code is given so transformers never asks on the terminal
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, trust_remote_code=False)
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), trust_remote_code=False, **kwargs)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    _drop_quantization_note(out / "config.json")
    # transformers writes the weights 0600; a server run as another user must read them
    for path in out.iterdir():
        path.chmod(0o644)


def _drop_quantization_note(config_path: Path) -> None:
    """A leftover `quantization_config` would make transformers and SGLang look for the GGUF again."""
    config = json.loads(config_path.read_text())
    if config.pop("quantization_config", None) is not None:
        config_path.write_text(json.dumps(config, indent=2) + "\n")


def check_target_folder(folder: Path, expected: Expected) -> None:
    """The doctor-style check of a built target (TargetBuildError naming every mismatch)."""
    problems: list[str] = []
    target = load_target(folder)
    facts = {
        "architecture": target.architectures[0] if target.architectures else None,
        "num_layers": target.num_layers,
        "hidden_size": target.hidden_size,
        "vocab_size": target.vocab_size,
    }
    for key, value in facts.items():
        if value != getattr(expected, key):
            problems.append(f"{key} is {value}, expected {getattr(expected, key)}")
    config = json.loads((folder / "config.json").read_text())
    if "quantization_config" in config:
        problems.append("config.json still has a quantization_config")
    tied = bool(config.get("tie_word_embeddings", False))
    if tied != expected.tied_embeddings:
        problems.append(f"tie_word_embeddings is {tied}, expected {expected.tied_embeddings}")
    problems += _weight_problems(folder, expected)
    if not _has_chat_template(folder):
        problems.append("the tokenizer has no chat template")
    if problems:
        raise TargetBuildError(f"{folder}: " + "; ".join(problems))


def _weight_problems(folder: Path, expected: Expected) -> list[str]:
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return ["no safetensors weights"]
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open handles are not iterable
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    problems = []
    embed = shapes.get(_EMBED_NAME)
    if embed != (expected.vocab_size, expected.hidden_size):
        problems.append(f"{_EMBED_NAME} is {embed}, expected {(expected.vocab_size, expected.hidden_size)}")
    head = [name for name in _HEAD_NAMES if name in shapes]
    if expected.tied_embeddings and head:
        problems.append("a tied target should have no lm_head.weight (the embedding is its head)")
    if not expected.tied_embeddings and not head:
        problems.append("no lm_head.weight in an untied target")
    return problems


def _has_chat_template(folder: Path) -> bool:
    from transformers import AutoTokenizer

    return has_chat_template(AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False))
