"""Loading a target (HF folder), its drafter (SGLang-layout folder) and, when present, its tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from drafting.ml.drafter import Eagle3Drafter, load_drafter
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


def load_models(model: str, draft: str | None, *, device: torch.device, dtype: torch.dtype) -> LoadedModels:
    from transformers import AutoModelForCausalLM

    check_model_folder(model, "target folder")  # transformers would block on a FIFO, read /dev/zero forever
    if draft is not None:
        check_model_folder(draft, "draft folder")
    target: Any = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
    target = target.to(device).eval()
    drafter = None
    if draft is not None:
        embed = target.get_input_embeddings().weight.detach()
        drafter = load_drafter(Path(draft), target_embed=embed, device=device, dtype=dtype)
    config = target.config
    return LoadedModels(
        target=target,
        drafter=drafter,
        tokenizer=_load_tokenizer(model),
        eos_ids=_eos_ids(config.eos_token_id),
        vocab_size=int(config.vocab_size),
        num_layers=int(config.num_hidden_layers),
    )


def _load_tokenizer(model: str) -> Any | None:
    if not any((Path(model) / name).exists() for name in _TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def _eos_ids(value: object) -> frozenset[int]:
    if isinstance(value, int):
        return frozenset({value})
    if isinstance(value, list | tuple):
        return frozenset(int(v) for v in value)
    return frozenset()
