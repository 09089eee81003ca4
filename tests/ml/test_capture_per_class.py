"""Capture follows the serving class, architecture by architecture, on the zoo's tiny random targets.

For every zoo target SGLang serves, and each recorded release: the states eyas captures at the aux layers are
what that release's class hands the draft (computed here directly from the HF model: the residual stream is
HF's `output_hidden_states[i]`; Gemma3's block branch in 0.5.23 is layer i-1's output minus the residual it
added back), the final state is the pre-norm input of the final norm, and the ids the drafter config saves
make the class capture exactly the trained layers (run through SGLang's own method where it is installed).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

from contract.params.extract import ExtractParams
from drafting.context import RecordingSink, StageContext
from drafting.ml._config import aux_capture_of, aux_layers_of, drafter_config
from drafting.ml.capture import capture_hidden_states, decoder_of, extraction_indices
from drafting.ml.hidden_store import hidden_path
from drafting.stages import extract
from drafting.support_matrix import CaptureKind, support_for
from drafting.support_matrix.releases import installed_release, recorded_tables
from drafting.support_matrix.scan import installed_models_dir
from tests.support_matrix.sglang_hooks import sglang_layers_to_capture
from testsupport import target_zoo as zoo
from testsupport.tiny_targets import chat, write_jsonl

RELEASES = ("0.5.14", "0.5.23")
CUSTOM = [3, 4, 5]  # not the default: DeepSeek's class keeps ids whose first is not 1


@pytest.fixture(scope="module")
def zoo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("zoo")


def zoo_target(root: Path, name: str) -> Path:
    folder = root / name
    return folder if folder.exists() else zoo.build(name, folder)


def load_text_model(folder: Path) -> nn.Module:
    """The HF model of a zoo folder; for the Kimi-shaped wrapper its DeepSeek-V3 text model, read from the
    `language_model.*` weights (its checkpoint names code the folder does not hold)."""
    config = json.loads((folder / "config.json").read_text())
    architecture = config["architectures"][0]
    if architecture != "KimiK25ForConditionalGeneration":
        model: nn.Module = getattr(transformers, architecture).from_pretrained(str(folder))
        return model.eval()
    text_folder = folder.parent / f"{folder.name}-text"
    if not text_folder.exists():
        text_folder.mkdir()
        text = {
            **config["text_config"],
            "model_type": "deepseek_v3",
            "architectures": ["DeepseekV3ForCausalLM"],
        }
        (text_folder / "config.json").write_text(json.dumps(text))
        tensors = {}
        for shard in sorted(folder.glob("*.safetensors")):
            with safe_open(str(shard), framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                    if name.startswith("language_model."):
                        tensors[name.removeprefix("language_model.")] = handle.get_tensor(name)
        from safetensors.torch import save_file

        save_file(tensors, str(text_folder / "model.safetensors"), metadata={"format": "pt"})
    text_model: nn.Module = transformers.DeepseekV3ForCausalLM.from_pretrained(str(text_folder))
    return text_model.eval()


@contextmanager
def inputs_of(modules: dict[int, nn.Module]) -> Iterator[dict[int, torch.Tensor]]:
    """The first positional input of each module during a forward (hooks independent of capture.py's)."""
    seen: dict[int, torch.Tensor] = {}
    handles = [
        module.register_forward_pre_hook(
            lambda _m, args, kw, i=i: seen.__setitem__(i, (args or (kw["hidden_states"],))[0]),
            with_kwargs=True,
        )
        for i, module in modules.items()
    ]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def expected_states(model: nn.Module, ids: torch.Tensor, aux: list[int], kind: CaptureKind) -> torch.Tensor:
    """[1, S, 4, T] by the rule: each aux layer's state as the serving class defines it, then the final
    decoder layer's pre-norm output (the input of the final norm)."""
    decoder = decoder_of(model)
    layers = decoder.layers
    mids = (
        {i: layers[i - 1].pre_feedforward_layernorm for i in aux} if kind is CaptureKind.BLOCK_BRANCH else {}
    )
    with inputs_of({**mids, -1: decoder.norm}) as seen:
        hidden = decoder(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    states = [hidden[i] - seen[i] if i in mids else hidden[i] for i in aux]
    return torch.stack([*states, seen[-1]], dim=2)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", zoo.SERVED)
def test_captured_states_are_what_the_serving_class_hands_the_draft(
    zoo_root: Path, name: str, release: str
) -> None:
    folder = zoo_target(zoo_root, name)
    config = json.loads((folder / "config.json").read_text())
    support = support_for(config, release)
    assert support is not None
    assert support.captures is not None
    model = load_text_model(folder)
    n = len(decoder_of(model).layers)
    aux = [2, n // 2, n - 3]
    ids = torch.randint(0, zoo.VOCAB - 8, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        captured = capture_hidden_states(model, ids, extraction_indices(aux, n), kind=support.captures)
        expected = expected_states(model, ids, aux, support.captures)
        residual = expected_states(model, ids, aux, CaptureKind.RESIDUAL_STREAM)
    torch.testing.assert_close(captured, expected, rtol=1e-5, atol=1e-5)
    gemma_0523 = name.startswith("gemma3") and release == "0.5.23"
    assert (support.captures is CaptureKind.BLOCK_BRANCH) is gemma_0523
    if gemma_0523:  # the branch is not the stream: capturing the stream here would train on other states
        assert not torch.allclose(captured[:, :, :3], residual[:, :, :3], atol=1e-3)
        torch.testing.assert_close(captured[:, :, 3], residual[:, :, 3])  # the final state stays pre-norm


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", zoo.SERVED)
def test_saved_aux_ids_map_back_to_the_trained_layers(zoo_root: Path, name: str, release: str) -> None:
    folder = zoo_target(zoo_root, name)
    target_config = json.loads((folder / "config.json").read_text())
    support = support_for(target_config, release)
    assert support is not None
    n = zoo.NUM_LAYERS
    for layers in ([2, n // 2, n - 3], CUSTOM):
        assert support.captures is not None
        config = drafter_config(
            target_config,
            draft_vocab_size=32,
            aux_layer_ids=layers,
            aux_capture=support.captures,
            sglang_version=release,
        )
        ids = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        assert support.layers_for(ids, n) == layers, (name, release, ids)
        assert aux_layers_of(config) == layers
        assert aux_capture_of(config) is support.captures
        if release == installed_release() and (models := installed_models_dir()) is not None:
            table = next(t for t in recorded_tables().values() if t.release == release)
            assert support.hook is not None
            assert sglang_layers_to_capture(models, table.rules, support.hook, ids, n) == layers
    deepseek_family = name in ("deepseek_v3", "kimi_k25")
    custom_ids = drafter_config(
        target_config, draft_vocab_size=32, aux_layer_ids=CUSTOM, sglang_version=release
    )
    assert custom_ids["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == (
        [3, 4, 5] if deepseek_family else [2, 3, 4]
    )


def test_a_deepseek_target_cannot_start_its_aux_layers_at_layer_one(zoo_root: Path) -> None:
    config: dict[str, Any] = json.loads((zoo_target(zoo_root, "deepseek_v3") / "config.json").read_text())
    with pytest.raises(ValueError, match="DeepseekV3ForCausalLM.*layer 1 cannot be the first aux layer"):
        drafter_config(config, draft_vocab_size=32, aux_layer_ids=[1, 4, 6])


@pytest.mark.parametrize(
    ("name", "release", "capture", "ids"),
    [
        ("gemma3_text", "0.5.14", CaptureKind.RESIDUAL_STREAM, [1, 3, 4]),
        ("gemma3_text", "0.5.23", CaptureKind.BLOCK_BRANCH, [1, 3, 4]),
        ("deepseek_v3", "0.5.14", CaptureKind.RESIDUAL_STREAM, [3, 4, 5]),
    ],
)
def test_the_extract_stage_stores_what_the_release_captures(
    zoo_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    release: str,
    capture: CaptureKind,
    ids: list[int],
) -> None:
    folder = zoo_target(zoo_root, name)
    rng = random.Random(0)
    data = write_jsonl(tmp_path / "data.jsonl", [chat(rng, turns=1, words=4) for _ in range(3)])
    aux = [2, 4, 5] if ids == [1, 3, 4] else [3, 4, 5]
    params = ExtractParams(
        target=str(folder), data=str(data), output=str(tmp_path / "out"), aux_layers=aux, max_len=32,
        dtype="float32", device="cpu", writer_threads=1, sglang_version=release,
    )  # fmt: skip
    extract.run(StageContext(work_dir=tmp_path, sink=RecordingSink()), params)
    manifest = json.loads((tmp_path / "out" / "eyas_manifest.json").read_text())
    assert manifest["aux_capture"] == capture.value
    assert manifest["sglang_version"] == release
    assert manifest["sglang_aux_layer_ids"] == ids
    serving_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("serving:"))
    assert f"in SGLang {release}" in serving_line
    model = load_text_model(folder)
    stored = load_file(hidden_path(tmp_path / "out", 0))
    with torch.no_grad():
        expected = expected_states(model, stored["token_ids"][None], aux, capture)[0]
    torch.testing.assert_close(stored["hidden_states"], expected, rtol=1e-5, atol=1e-5)
