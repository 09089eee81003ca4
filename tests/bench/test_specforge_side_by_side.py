"""bench.specforge_side_by_side: an eyas extraction converted to SpecForge 0.2.0's offline layout,
trained by SpecForge's own trainer (its CLI, its data reader, its model), exported to SGLang's layout and
passed by `eyas fix-keys`. On this CPU machine SpecForge's one CUDA-only piece, its Triton loss
kernel, runs as the reference SpecForge ships beside it; everything else is SpecForge's installed code."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from bench import specforge_side_by_side as side
from contract.params.extract import ExtractParams
from drafting.context import RecordingSink, StageContext
from drafting.ml._dataset import read_dataset_rows, read_token_freq
from drafting.ml.hidden_store import read_manifest
from drafting.ml.train_data import split_indices
from drafting.ml.vocab import d2t_offsets, draft_token_ids
from drafting.stages import extract
from testsupport.tiny_targets import chat, random_target, write_jsonl

DRAFT_VOCAB = 64


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny target and eyas's real extract stage on 12 conversations, in float32 (compared exactly)."""
    root = tmp_path_factory.mktemp("specforge")
    target = random_target(root / "target")
    rng = random.Random(3)
    data = write_jsonl(root / "data.jsonl", [chat(rng, turns=1 + i % 3, words=4 + i % 5) for i in range(12)])
    params = ExtractParams(
        target=str(target), data=str(data), output=str(root / "ext"), max_len=64, batch_size=4,
        dtype="float32", device="cpu",
    )  # fmt: skip
    extract.run(StageContext(work_dir=root, sink=RecordingSink()), params)
    return target, root / "ext"


@torch.no_grad()
def test_converted_samples_are_what_the_target_computes_in_specforges_layout(
    prepared: tuple[Path, Path], tmp_path: Path
) -> None:
    target, extraction = prepared
    done = side.convert(extraction, target, tmp_path / "hs", val_fraction=0.2, seed=0, dtype=torch.float32)
    train, val = split_indices(12, 0.2, 0)
    assert (done["train_rows"], done["val_rows"]) == (len(train), len(val)) == (10, 2)
    ids, masks = read_dataset_rows(extraction)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    manifest = read_manifest(extraction)
    assert manifest is not None
    aux = manifest["aux_layers"]  # HF hidden-state indices: low, mid, high
    for split, rows in (("train", train), ("val", val)):
        for number, row in enumerate(rows):
            record = torch.load(tmp_path / "hs" / split / "rows_0-2000" / f"data_{number}.ckpt")
            assert set(record) == {"input_ids", "loss_mask", "hidden_state", "aux_hidden_state"}
            assert record["input_ids"].tolist() == ids[row]
            assert record["loss_mask"].tolist() == masks[row]  # 1 on answer tokens, unshifted, as SpecForge's
            states = model(torch.tensor([ids[row]]), output_hidden_states=True).hidden_states
            # SpecForge's head is the lm_head alone: the last state after the final norm, as HF returns it
            torch.testing.assert_close(record["hidden_state"], states[-1], rtol=1e-5, atol=1e-5)
            expected_aux = torch.cat([states[i] for i in aux], dim=-1)
            torch.testing.assert_close(record["aux_hidden_state"], expected_aux, rtol=1e-5, atol=1e-5)


def test_the_target_view_names_a_tied_embedding_as_the_head(tmp_path: Path) -> None:
    tied = random_target(tmp_path / "tied", tie_word_embeddings=True)
    assert side.target_view(tied, tmp_path / "view_tied") == "model.embed_tokens.weight"
    index = json.loads((tmp_path / "view_tied" / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["model.norm.weight"] == "model.safetensors"
    assert (tmp_path / "view_tied" / "config.json").resolve() == (tied / "config.json").resolve()
    untied = random_target(tmp_path / "untied", tie_word_embeddings=False)
    assert side.target_view(untied, tmp_path / "view_untied") == "lm_head.weight"


@pytest.mark.timeout(900)
def test_specforges_trainer_trains_on_the_conversion_and_its_export_passes_fix_keys(
    prepared: tuple[Path, Path], tmp_path: Path
) -> None:
    target, extraction = prepared
    argv = [str(extraction), str(target), str(tmp_path / "work"), "--device", "cpu", "--epochs", "1",
            "--max-steps", "3", "--ttt-steps", "3", "--max-len", "64", "--draft-vocab-size", str(DRAFT_VOCAB),
            "--val-fraction", "0.2", "--log-interval", "1", "--eval-interval", "2"]  # fmt: skip
    args: argparse.Namespace = side.parse(argv)
    record = side.side_by_side(args)
    log = (tmp_path / "work" / "specforge.log").read_text()
    assert record["train"]["returncode"] == 0, log[-3000:]
    steps = [m for m in record["metrics"] if m["kind"] == "train"]
    assert [m["step"] for m in steps] == [1, 2, 3]  # SpecForge's own per-step metrics, parsed
    assert {"acc_0", "acc_1", "acc_2", "loss"} <= set(steps[-1])
    evaluated = record["eval_last"]  # on eyas's validation rows, every 2 steps
    assert evaluated["step"] == 2
    assert len(evaluated["eval/per_position_acc"]) == 3  # one per TTT step
    assert all(0 <= acc <= 1 for acc in evaluated["eval/per_position_acc"])
    assert record["export"]["returncode"] == 0, log[-3000:]
    exported = load_file(tmp_path / "work" / "exported" / "model.safetensors")
    config = json.loads((target / "config.json").read_text())
    ours = draft_token_ids(read_token_freq(extraction), DRAFT_VOCAB, config["vocab_size"])
    assert torch.equal(exported["d2t"], d2t_offsets(ours))  # eyas's draft vocabulary, as given
    assert exported["fc.weight"].shape == (config["hidden_size"], 3 * config["hidden_size"])
    fixed = record["fix_keys"]
    assert fixed["returncode"] == 0, fixed
    assert fixed["report"]["ok"] is True
    assert (tmp_path / "work" / "sglang_draft" / "model.safetensors").exists()
    written = json.loads((tmp_path / "work" / "specforge_run.json").read_text())
    assert written["prepared"]["converted"]["val_rows"] == 2


def test_flex_attention_on_a_gpu_unless_asked_and_sdpa_on_a_cpu(tmp_path: Path) -> None:
    head = ["/w/extraction", "/w/target", str(tmp_path)]
    schedule = [
        "--epochs",
        "10",
        "--ttt-steps",
        "7",
        "--lr",
        "1e-3",
        "--batch-size",
        "32",
        "--max-len",
        "1024",
    ]
    args = side.parse([*head, *schedule])
    assert (args.epochs, args.ttt_steps, args.lr, args.batch_size, args.max_len) == (10, 7, 1e-3, 32, 1024)
    config = side.run_config(args, tmp_path, "lm_head.weight")
    assert config["training"]["attention_backend"] == "flex_attention"
    assert (config["training"]["num_epochs"], config["training"]["ttt_length"]) == (10, 7)
    sdpa = side.parse([*head, *schedule, "--attention-backend", "sdpa"])  # where flex attention is slow
    assert side.run_config(sdpa, tmp_path, "lm_head.weight")["training"]["attention_backend"] == "sdpa"
    on_cpu = side.parse([*head, "--device", "cpu"])
    assert side.run_config(on_cpu, tmp_path, "lm_head.weight")["training"]["attention_backend"] == "sdpa"
