"""Every servable zoo target (testsupport/target_zoo.py) through the user's path on the CPU: generate (the
reference engine answering with the target itself) -> extract -> train, with the real stages.

Beyond running without a traceback, what the trainer learns from is checked against the target: the stored
last state of each extracted token, through the trainer's head, gives the text model's own next-token
distribution at that token (argmax agreement 1.0, total variation < 1e-3).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from contract.params.extract import ExtractParams
from drafting.context import StageContext
from drafting.ml.hidden_store import load_sample
from drafting.ml.target_head import load_target_head
from drafting.ml.text_model import load_text_model
from drafting.stages import extract, generate, train
from tests.generation.conftest import generate_params, output_records, write_prompts
from testsupport.target_zoo import EOS, SERVED, VOCAB, build
from testsupport.tiny_targets import cpu_train_params


def user_path(root: Path, target: Path) -> dict[str, Path]:
    """generate -> extract -> train (one epoch of a few steps): the folders each stage wrote."""
    ctx = StageContext(work_dir=root)
    prompts = write_prompts(
        root / "prompts.jsonl",
        [{"messages": [{"role": "user", "content": f"w{i} w{i + 1} w{i + 2}"}]} for i in range(4)],
    )
    conversations = root / "conversations.jsonl"
    generated = generate.run(
        ctx,
        generate_params(
            target, conversations, prompts=str(prompts), max_new_tokens=8, temperature=1.0, concurrency=1
        ),
    )
    # a random target may end an answer at once (dropped as empty_answer); the rest are written
    written, empty = generated["records"]["written"], generated["dropped"].get("empty_answer", 0)
    assert written + empty == 4, generated
    assert written >= 2, generated
    extract.run(
        ctx,
        ExtractParams(
            target=str(target), data=str(conversations), output=str(root / "hs"), device="cpu",
            dtype="float32", max_len=64,
        ),
    )  # fmt: skip
    params = cpu_train_params(
        target, root / "hs", root / "train", epochs=1, batch_size=1, ttt_steps=2,
        draft_vocab_size=32, val_fraction=0.0, max_len=64, warmup_steps=0,
    )  # fmt: skip
    trained = train.run(ctx, params)
    return {"conversations": conversations, "hs": root / "hs", "checkpoint": Path(trained["checkpoint"])}


@pytest.mark.parametrize("name", SERVED)
def test_generate_extract_and_train_on_every_servable_zoo_target(tmp_path: Path, name: str) -> None:
    target = build(name, tmp_path / "target")
    out = user_path(tmp_path, target)
    answers = [r["messages"][-1] for r in output_records(out["conversations"])]
    assert all(m["role"] == "assistant" for m in answers)
    config = json.loads((out["checkpoint"] / "config.json").read_text())
    assert (config["hidden_size"], config["vocab_size"]) == (32, VOCAB)

    stored = load_sample(out["hs"], 0)
    ids = stored["token_ids"][None]
    model = load_text_model(target, dtype=torch.float32)
    with torch.no_grad():
        own = model(input_ids=ids, use_cache=False).logits.softmax(-1)
    probs, argmax = load_target_head(target).distribution(
        stored["hidden_states"][None, :, 3], torch.arange(VOCAB)
    )
    assert (argmax == own.argmax(-1)).all()
    assert float(0.5 * (probs - own).abs().sum(-1).max()) < 1e-3


def test_the_reference_engine_stops_gemma3_multimodal_at_its_text_eos(tmp_path: Path) -> None:
    """A multimodal config's eos_token_id sits in its text config (transformers 5's Gemma3Config has none
    at the top): the engine reads it there and from config.json, and the answers stop at it."""
    from drafting.serving.engine.models import load_models

    target = build("gemma3_multimodal", tmp_path / "target")
    models = load_models(str(target), None, device=torch.device("cpu"), dtype=torch.float32)
    assert models.eos_ids == frozenset({EOS})
    assert models.num_layers == 8
    assert type(models.target).__name__ == "Gemma3ForCausalLM"
