"""Tiny drafters written by the real training libraries (speculators' through tests/_drafts.py) and a
tiny target config.

Sizes: draft hidden 32 (4 heads of 8, 2 KV heads), intermediate 64, target vocab 256, draft vocab 64,
target with 8 layers. speculators' and SpecForge's own model classes save them, so the key names, dtypes
and config layouts are the libraries', not ours.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests._drafts import DraftShape, fill_finite, layer_config, vocab_map, write_speculators_draft

HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM = 32, 64, 4, 2, 8
VOCAB, DRAFT_VOCAB, TARGET_LAYERS = 256, 64, 8
TINY = DraftShape(HIDDEN, INTER, HEADS, KV_HEADS, VOCAB, DRAFT_VOCAB, max_positions=512)
TARGET_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": HIDDEN,
    "intermediate_size": 128,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "num_hidden_layers": TARGET_LAYERS,
    "vocab_size": VOCAB,
    "max_position_embeddings": 4096,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    },
    "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="session")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("target")
    (folder / "config.json").write_text(json.dumps(TARGET_CONFIG))
    return folder


@pytest.fixture(scope="session")
def speculators_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Eagle3DraftModel saved with speculators' save_pretrained (aux ids in speculators' convention)."""
    return write_speculators_draft(tmp_path_factory.mktemp("speculators") / "draft", TINY)


def write_specforge_draft(folder: Path, dtype: torch.dtype = torch.float32) -> Path:
    """SpecForge's LlamaForCausalLMEagle3 in `dtype`, saved the way its training script did: embeddings
    filtered out, save_pretrained of the model (so transformers writes the flat config and its dtype).

    specforge pins torch/sglang versions that conflict with this stack, so it is installed with --no-deps
    (like speculators); its draft module imports without those pins.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llama3_eagle = pytest.importorskip("specforge.modeling.draft.llama3_eagle")
    LlamaForCausalLMEagle3 = llama3_eagle.LlamaForCausalLMEagle3  # the library's class name

    config = layer_config(TINY)
    config.architectures = ["LlamaForCausalLMEagle3"]
    config.draft_vocab_size = DRAFT_VOCAB
    model = LlamaForCausalLMEagle3(config)
    fill_finite(model)
    d2t, t2d = vocab_map(TINY)
    model.d2t.copy_(d2t)
    model.t2d.copy_(t2d)
    model.to(dtype)
    state = {k: v for k, v in model.state_dict().items() if "embed" not in k}
    model.save_pretrained(folder, state_dict=state)
    return folder


@pytest.fixture(scope="session")
def specforge_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_specforge_draft(tmp_path_factory.mktemp("specforge") / "draft")


@pytest.fixture(scope="session")
def clean_draft(tmp_path_factory: pytest.TempPathFactory, speculators_draft: Path) -> Path:
    """A draft SGLang loads as is: the base every defect test breaks.

    Built by hand (not by the converter under test) from speculators' weights, in the classic
    SpecForge/EAGLE layout: `midlayer.*`, no embedding, no t2d, bf16 (stated in the config), flat config
    with the target's rope.
    """
    folder = tmp_path_factory.mktemp("clean") / "draft"
    folder.mkdir()
    tensors = {
        name.replace("layers.0.", "midlayer."): value.to(torch.bfloat16)
        if value.is_floating_point()
        else value
        for name, value in load_file(speculators_draft / "model.safetensors").items()
        if name not in ("embed_tokens.weight", "t2d")
    }
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    config = layer_config(TINY).to_diff_dict()
    config.pop("rope_parameters", None)
    config.update({k: TARGET_CONFIG[k] for k in ("rope_theta", "rope_scaling", "max_position_embeddings")})
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=DRAFT_VOCAB,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",  # without it SGLang builds the draft in float16 (its weights are bf16)
    )
    (folder / "config.json").write_text(json.dumps(config))
    return folder


Patch = Callable[[dict[str, Any], dict[str, torch.Tensor]], None]


@pytest.fixture
def broken_draft(tmp_path: Path, clean_draft: Path) -> Callable[[Patch], Path]:
    """A copy of the clean draft with a patch applied to its config and tensors."""

    made: list[Path] = []

    def make(patch: Patch) -> Path:
        folder = tmp_path / f"broken{len(made)}"
        made.append(folder)
        shutil.copytree(clean_draft, folder)
        config = json.loads((folder / "config.json").read_text())
        tensors = load_file(folder / "model.safetensors")
        patch(config, tensors)
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "model.safetensors").unlink()
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        return folder

    return make


def folder_digest(folder: Path) -> dict[str, bytes]:
    """Every file's bytes (tiny checkpoints), to prove a folder was not changed."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
