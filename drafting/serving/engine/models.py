"""Loading a target (HF folder), its drafter (SGLang-layout folder) and, when present, its tokenizer.

The target is its text model (drafting/ml/text_model.py): a multimodal or wrapped checkpoint serves its
language model, read with transformers' own class; its stop ids come from the text config, config.json's
top level and the generation config, as SGLang gathers them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from drafting.ml._config import text_config
from drafting.ml.drafter import Eagle3Drafter, load_drafter
from drafting.ml.text_model import load_text_model, load_tokenizer, read_target_config
from drafting.userfiles import check_model_folder

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


@dataclass
class LoadedModels:
    target: nn.Module
    drafter: Eagle3Drafter | None
    tokenizer: Any | None  # a transformers tokenizer when the target folder has one
    eos_ids: frozenset[int]
    vocab_size: int
    num_layers: int


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_models(
    model: str,
    draft: str | None,
    *,
    device: torch.device,
    dtype: torch.dtype,
    trust_remote_code: bool = False,
) -> LoadedModels:
    check_model_folder(model, "target folder")  # transformers would block on a FIFO, read /dev/zero forever
    if draft is not None:
        check_model_folder(draft, "draft folder")
    target: Any = load_text_model(model, dtype=dtype, trust_remote_code=trust_remote_code)
    target = target.to(device).eval()
    drafter = None
    if draft is not None:
        embed = target.get_input_embeddings().weight.detach()
        drafter = load_drafter(Path(draft), target_embed=embed, device=device, dtype=dtype)
    config = target.config
    return LoadedModels(
        target=target,
        drafter=drafter,
        tokenizer=_load_tokenizer(model, trust_remote_code),
        eos_ids=_eos_ids(Path(model), config),
        vocab_size=int(config.vocab_size),
        num_layers=int(config.num_hidden_layers),
    )


def _load_tokenizer(model: str, trust_remote_code: bool) -> Any | None:
    if not any((Path(model) / name).exists() for name in _TOKENIZER_FILES):
        return None
    return load_tokenizer(model, trust_remote_code=trust_remote_code)


def _eos_ids(folder: Path, text_model_config: Any) -> frozenset[int]:
    """The text model's eos_token_id and config.json's own (a wrapper states it at its top level; a
    multimodal transformers 5 config object has none of its own there)."""
    config = read_target_config(folder)
    ids = token_ids(getattr(text_model_config, "eos_token_id", None))
    for source in (config, text_config(config)):
        ids |= token_ids(source.get("eos_token_id"))
    return frozenset(ids)


def token_ids(value: object) -> set[int]:
    """A config's token id field as a set: one id, a list of them, or nothing."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    if isinstance(value, list | tuple):
        return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()
