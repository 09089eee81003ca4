"""The frozen parts of the target the trainer needs: embeddings (drafter input), final norm and lm_head
(to turn the stored last hidden states into the target's next-token distribution).

Only these three tensors are read from the target's safetensors (through the shard index when there is one),
so training a drafter for a 70B target does not load 70B parameters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open

from drafting.ml._config import text_config
from drafting.userfiles import Cap, check_regular, read_user_json_object

_EMBED_NAMES = (
    "model.embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "embed_tokens.weight",
)
_NORM_NAMES = ("model.norm.weight", "model.language_model.norm.weight", "norm.weight")
_HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight")
DISTRIBUTION_CHUNK = 2048  # positions per full-vocab matmul: bounds the [chunk, vocab] logits in memory


class TargetWeightsError(Exception):
    pass


@dataclass
class TargetHead:
    embed: torch.Tensor  # [V, T]
    norm_weight: torch.Tensor  # [T]
    lm_head: torch.Tensor  # [V, T]
    eps: float

    def to(self, device: torch.device, dtype: torch.dtype) -> TargetHead:
        return TargetHead(
            self.embed.to(device, dtype),
            self.norm_weight.to(device),
            self.lm_head.to(device, dtype),
            self.eps,
        )

    @torch.no_grad()
    def distribution(self, last: torch.Tensor, draft_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """From pre-norm last states [B, S, T]: (probabilities over the draft vocab [B, S, Vd] in the head's
        dtype, the target's full-vocab argmax [B, S])."""
        flat = last.reshape(-1, last.shape[-1])
        probs, argmax = [], []
        for chunk in flat.split(DISTRIBUTION_CHUNK):
            normed = F.rms_norm(chunk.float(), (chunk.shape[-1],), self.norm_weight.float(), self.eps)
            logits = normed.to(self.lm_head.dtype) @ self.lm_head.T
            argmax.append(logits.argmax(dim=-1))
            probs.append(logits[:, draft_ids].float().softmax(dim=-1).to(self.lm_head.dtype))
        shape = last.shape[:-1]
        return torch.cat(probs).view(*shape, -1), torch.cat(argmax).view(shape)

    @torch.no_grad()
    def draft_distribution(self, last: torch.Tensor, draft_rows: torch.Tensor) -> torch.Tensor:
        """`distribution`'s probabilities alone, from the draft vocab's rows of lm_head (`draft_rows`
        [Vd, T]): the same logits, without the full-vocab matmul the argmax needs (argmax_cache.py)."""
        flat = last.reshape(-1, last.shape[-1])
        probs = []
        for chunk in flat.split(DISTRIBUTION_CHUNK):
            normed = F.rms_norm(chunk.float(), (chunk.shape[-1],), self.norm_weight.float(), self.eps)
            logits = normed.to(draft_rows.dtype) @ draft_rows.T
            probs.append(logits.float().softmax(dim=-1).to(draft_rows.dtype))
        return torch.cat(probs).view(*last.shape[:-1], -1)


def weight_files(folder: Path) -> dict[str, Path]:
    """tensor name -> file holding it."""
    index = folder / "model.safetensors.index.json"
    if os.path.lexists(index):
        weight_map = read_user_json_object(index, Cap.CONFIG, index.name).get("weight_map")
        if not isinstance(weight_map, dict):
            raise TargetWeightsError(f"{index} has no weight_map object")
        files = {name: folder / str(file) for name, file in weight_map.items()}
        for path in set(files.values()):
            if os.path.lexists(path):  # a shard that is missing fails when a tensor in it is read
                check_regular(path, Cap.WEIGHTS, "weight file")
        return files
    single = folder / "model.safetensors"
    if not os.path.lexists(single):
        raise TargetWeightsError(f"{folder} has neither model.safetensors nor model.safetensors.index.json")
    check_regular(single, Cap.WEIGHTS, "weight file")  # safetensors' open would wait on a FIFO
    with safe_open(str(single), framework="pt") as handle:
        return dict.fromkeys(handle.keys(), single)


def _present(files: dict[str, Path], names: tuple[str, ...], what: str) -> str:
    name = next((n for n in names if n in files), None)
    if name is None:
        raise TargetWeightsError(f"the target has no {what} tensor (looked for {', '.join(names)})")
    return name


def _read(files: dict[str, Path], name: str) -> torch.Tensor:
    check_regular(files[name], Cap.WEIGHTS, "weight file")
    with safe_open(str(files[name]), framework="pt") as handle:
        tensor: torch.Tensor = handle.get_tensor(name)
        return tensor


def weight_names(files: dict[str, Path], target_config: dict[str, Any]) -> dict[str, str]:
    """The tensor names the trainer reads as `embed`, `norm` and `lm_head` (`files`: weight_files'); a tied
    target's lm_head is its input embedding."""
    text = text_config(target_config)
    embed = _present(files, _EMBED_NAMES, "input embedding")
    tied = bool(text.get("tie_word_embeddings", False)) and not any(n in files for n in _HEAD_NAMES)
    return {
        "embed": embed,
        "norm": _present(files, _NORM_NAMES, "final norm"),
        "lm_head": embed if tied else _present(files, _HEAD_NAMES, "lm_head"),
    }


def read_final_norm(folder: Path, target_config: dict[str, Any]) -> tuple[torch.Tensor, float]:
    """The final norm's weight and eps alone (no embedding or lm_head read)."""
    files = weight_files(Path(folder))
    norm = _read(files, _present(files, _NORM_NAMES, "final norm"))
    return norm, float(text_config(target_config).get("rms_norm_eps", 1e-6))


def load_target_head(folder: Path, target_config: dict[str, Any]) -> TargetHead:
    text = text_config(target_config)
    files = weight_files(Path(folder))
    names = weight_names(files, target_config)
    embed = _read(files, names["embed"])
    lm_head = embed if names["lm_head"] == names["embed"] else _read(files, names["lm_head"])
    head = TargetHead(embed, _read(files, names["norm"]), lm_head, float(text.get("rms_norm_eps", 1e-6)))
    expected = (int(text["vocab_size"]), int(text["hidden_size"]))
    for name, tensor in (("embed", head.embed), ("lm_head", head.lm_head)):
        if tuple(tensor.shape) != expected:
            raise TargetWeightsError(f"target {name} is {tuple(tensor.shape)}, config says {expected}")
    return head
