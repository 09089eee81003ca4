"""Targets with tied embeddings (no `lm_head.weight`: the embedding is the head) through every step that
reads the target: the trainer's target head and lm_head init, extract, train, fix_keys, the doctor and eval.

Two targets: a tiny random Llama built from a config with tie_word_embeddings (seconds), and the real
SmolLM2-135M-Instruct (30 layers, hidden 576) built from its package's GGUF (marked realmodel).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from contract.params.checkpoint import FixKeysParams
from contract.params.extract import ExtractParams
from drafting.checkpoint import diagnose
from drafting.context import StageContext
from drafting.findings import Severity
from drafting.ml.target_head import load_target_head
from drafting.ml.text_model import TargetModelError
from drafting.serving.engine.models import load_models
from drafting.serving.evaluation.offline import evaluate_acceptance
from drafting.serving.prompts import prepare_prompts
from drafting.stages import extract, fix_keys, train
from tests.realmodels.targets import realmodel, smollm2_target
from testsupport.tiny_targets import chat, cpu_train_params, random_target, write_jsonl


def _tensor_names(folder: Path) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        return set(handle.keys())


def _pipeline(root: Path, target: Path, data: list[Any], *, max_len: int, draft_vocab: int) -> dict[str, Any]:
    """extract → train (a few steps, lm_head from the target's, which is its embedding) → fix_keys, on
    the CPU; returns the folders and the train result."""
    ctx = StageContext(work_dir=root)
    conversations = write_jsonl(root / "data.jsonl", data)
    extract.run(
        ctx,
        ExtractParams(
            target=str(target), data=str(conversations), output=str(root / "hs"), device="cpu",
            dtype="float32", max_len=max_len,
        ),
    )  # fmt: skip
    params = cpu_train_params(
        target, root / "hs", root / "train", epochs=1, batch_size=1, ttt_steps=2, lr=1e-9, warmup_steps=0,
        draft_vocab_size=draft_vocab, init_lm_head="target", val_fraction=0.0, max_len=max_len,
    )  # fmt: skip
    trained = train.run(ctx, params)
    draft = root / "sglang_draft"
    fix_keys.run(ctx, FixKeysParams(source=trained["checkpoint"], dest=str(draft), target_config=str(target)))
    return {"checkpoint": Path(trained["checkpoint"]), "draft": draft}


def _lm_head_is_the_embedding(target: Path, draft: Path) -> None:
    """Initialised from the target's head, which for a tied target is its embedding (lr ~0 keeps it)."""
    tensors = load_file(draft / "model.safetensors")
    draft_ids = torch.arange(tensors["d2t"].shape[0]) + tensors["d2t"]
    with safe_open(str(target / "model.safetensors"), framework="pt") as handle:
        embed = handle.get_tensor("model.embed_tokens.weight").float()
    torch.testing.assert_close(tensors["lm_head.weight"].float(), embed[draft_ids], atol=2e-3, rtol=1e-2)


def _doctor_errors(draft: Path, target: Path) -> list[Any]:
    report = diagnose(draft, target=target)
    return [f for f in report.findings if f.severity == Severity.ERROR]


def test_a_tiny_tied_target_goes_through_extract_train_fix_keys_doctor_and_eval(tmp_path: Path) -> None:
    target = random_target(tmp_path / "target", tie_word_embeddings=True)
    assert "lm_head.weight" not in _tensor_names(target)
    head = load_target_head(target)
    assert head.lm_head is head.embed
    rng = random.Random(0)
    out = _pipeline(
        tmp_path, target, [chat(rng, turns=2, words=6) for _ in range(6)], max_len=48, draft_vocab=40
    )
    _lm_head_is_the_embedding(target, out["draft"])
    config = json.loads((out["draft"] / "config.json").read_text())
    assert config["tie_word_embeddings"] is False  # the draft owns its lm_head; only the target is tied
    assert _doctor_errors(out["draft"], target) == []
    models = load_models(str(target), str(out["draft"]), device=torch.device("cpu"), dtype=torch.float32)
    prompts = prepare_prompts(None, limit=2, tokenizer_folder=target)
    rows = evaluate_acceptance(models, prompts, [2], max_new_tokens=6, ignore_eos=True, check_outputs=True)
    assert rows[0]["outputs_match"] is True
    assert rows[0]["divergence"]["identical"] == 2


def test_an_untied_target_without_its_lm_head_is_refused(tmp_path: Path) -> None:
    target = random_target(tmp_path / "target", tie_word_embeddings=True)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    with pytest.raises(TargetModelError, match="no lm_head tensor"):
        load_target_head(target)


@realmodel
def test_the_real_smollm2_goes_through_extract_train_fix_keys_doctor_and_eval(tmp_path: Path) -> None:
    target = smollm2_target()
    head = load_target_head(target)
    assert head.lm_head is head.embed
    assert tuple(head.embed.shape) == (49152, 576)
    data = [
        {"messages": [{"role": "user", "content": "Name three colours."},
                      {"role": "assistant", "content": "Red, green and blue."}]},
        {"messages": [{"role": "user", "content": "What is 2 + 2?"},
                      {"role": "assistant", "content": "2 + 2 is 4."}]},
    ]  # fmt: skip
    out = _pipeline(tmp_path, target, data, max_len=64, draft_vocab=256)
    _lm_head_is_the_embedding(target, out["draft"])
    config = json.loads((out["draft"] / "config.json").read_text())
    # SGLang's ids of HF hidden states [2, 15, 27]: the default capture points of a 30-layer target
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, 26]
    assert (config["hidden_size"], config["vocab_size"], config["tie_word_embeddings"]) == (576, 49152, False)
    assert _doctor_errors(out["draft"], target) == []
    models = load_models(str(target), str(out["draft"]), device=torch.device("cpu"), dtype=torch.float32)
    assert models.num_layers == 30
    prompts = prepare_prompts("mtbench", limit=1, tokenizer_folder=target)
    rows = evaluate_acceptance(models, prompts, [2], max_new_tokens=6, ignore_eos=True, check_outputs=True)
    assert rows[0]["outputs_match"] is True
    assert rows[0]["by_category"]["writing"]["prompts"] == 1
