"""Saving and loading drafters in SGLang's layout (config.json + model.safetensors)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from drafting.ml._config import DRAFTER_ARCHITECTURE, text_config
from drafting.userfiles import Cap, check_regular, read_user_json_object

if TYPE_CHECKING:
    from drafting.ml.drafter import Eagle3Drafter

# Keys SGLang's loader accepts but eyas neither needs nor writes: the embedding is the target's and
# t2d is ignored.
_IGNORED_ON_LOAD = ("embed_tokens.weight", "t2d")
# Older and newer spellings SGLang maps onto the same modules.
_LEGACY_PREFIXES = {"layers.0.": "midlayer.", "model.": ""}

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def checkpoint_tensors(model: Eagle3Drafter, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The state that goes on disk: everything but the frozen embedding, floats cast to `dtype`."""
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("embed_tokens."):
            continue
        tensor = tensor.detach()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensors[name] = tensor.to("cpu").contiguous()
    return tensors


def save_drafter(model: Eagle3Drafter, folder: Path, *, target_config: dict[str, Any]) -> None:
    """Write config.json + model.safetensors into `folder`, replacing it whole (never half-written)."""
    _check_matches_target(model.config, target_config)
    dtype = _DTYPES.get(str(model.config.get("dtype") or model.config.get("torch_dtype")), torch.bfloat16)
    folder = Path(folder)
    staging = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_file(checkpoint_tensors(model, dtype), staging / "model.safetensors", metadata={"format": "pt"})
    (staging / "config.json").write_text(json.dumps(model.config, indent=2, sort_keys=True) + "\n")
    _swap_in(staging, folder)


def _swap_in(staging: Path, folder: Path) -> None:
    """Rename staging onto folder; an existing folder is moved aside first and removed after."""
    retired = folder.with_name(f".{folder.name}.old-{os.getpid()}")
    if folder.exists():
        os.replace(folder, retired)
    os.replace(staging, folder)
    shutil.rmtree(retired, ignore_errors=True)


def _check_matches_target(config: dict[str, Any], target_config: dict[str, Any]) -> None:
    text = text_config(target_config)
    for key in ("hidden_size", "vocab_size"):
        if key in text and int(text[key]) != int(config[key]):
            raise ValueError(f"drafter {key} {config[key]} != target's {text[key]}")


def read_drafter_config(folder: Path) -> dict[str, Any]:
    config = read_user_json_object(Path(folder) / "config.json", Cap.CONFIG, "draft config.json")
    if DRAFTER_ARCHITECTURE not in config.get("architectures", []):
        raise ValueError(f"{folder}/config.json is not a {DRAFTER_ARCHITECTURE} config")
    return config


def load_drafter(
    folder: Path, *, target_embed: torch.Tensor, device: torch.device | str, dtype: torch.dtype
) -> Eagle3Drafter:
    """Build the drafter from config.json, load its weights strictly and attach the target's embedding."""
    from drafting.ml.drafter import Eagle3Drafter

    folder = Path(folder)
    model = Eagle3Drafter(read_drafter_config(folder))
    check_regular(folder / "model.safetensors", Cap.WEIGHTS, "draft weights")
    tensors = _canonical_names(load_file(str(folder / "model.safetensors")))
    expected = set(checkpoint_tensors(model))
    missing, unexpected = expected - tensors.keys(), tensors.keys() - expected
    if "d2t" in missing and model.config["draft_vocab_size"] == model.config["vocab_size"]:
        # A full-vocabulary draft needs no map: speculators saves none then, SGLang serves it as the identity,
        # and the zero offsets the drafter starts with are that identity (target = draft + d2t[draft]).
        missing.discard("d2t")
    if missing or unexpected:
        raise ValueError(
            f"{folder}/model.safetensors does not match the config: missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)}"
        )
    model.load_state_dict(tensors, strict=False)
    model.set_target_embeddings(target_embed.to(model.embed_tokens.weight.dtype))
    return model.to(device=device, dtype=dtype).eval()


def _canonical_names(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    renamed: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        for legacy, current in _LEGACY_PREFIXES.items():
            if name.startswith(legacy):
                name = current + name[len(legacy) :]
        if name not in _IGNORED_ON_LOAD:
            renamed[name] = tensor
    return renamed
