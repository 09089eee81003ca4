"""The transformers side of the matrix, against the zoo's checkpoints loaded by transformers 5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers
from safetensors import safe_open

from drafting.support_matrix.text_model import RemoteCode, placement
from testsupport import target_zoo as zoo


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("text-zoo")


def saved_names(folder: Path) -> set[str]:
    names: set[str] = set()
    for shard in folder.glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as handle:
            names |= set(handle.keys())
    return names


@pytest.mark.parametrize("name", ["llama", "qwen3_moe", "gemma3_multimodal", "llava", "deepseek_v3"])
def test_the_embedding_is_where_the_saved_checkpoint_has_it(root: Path, name: str) -> None:
    folder = zoo.build(name, root / name)
    config = json.loads((folder / "config.json").read_text())
    found = placement(config)
    assert found.transformers_class == config["architectures"][0]
    model = getattr(transformers, config["architectures"][0]).from_pretrained(str(folder))
    assert found.embedding in dict(model.named_parameters())
    assert model.get_input_embeddings().weight is model.get_parameter(found.embedding)
    if "text_config" in config:  # stored under the older name, which transformers renames on load
        assert "language_model.model.embed_tokens.weight" in saved_names(folder)
    assert found.head == "lm_head.weight"
    assert found.remote_code is RemoteCode.NONE
    assert (found.nested_config == "text_config") is ("text_config" in config)


def test_remote_code_is_needed_only_where_transformers_knows_nothing_of_the_model(root: Path) -> None:
    kimi = json.loads((zoo.build("kimi_k25", root / "kimi") / "config.json").read_text())
    found = placement(kimi)
    assert found.transformers_class is None  # not under the hub's name: no embedding name to give
    assert found.embedding is None
    assert (
        found.remote_code is RemoteCode.NOT_NEEDED
    )  # its text model is DeepSeek-V3, which transformers ships
    unknown = {**kimi, "model_type": "nobody_knows", "text_config": {"model_type": "nor_this"}}
    assert placement(unknown).remote_code is RemoteCode.REQUIRED
