"""bench.speculators_side_by_side on CPU: speculators 0.9.0's own trainer
(`main(TrainConfig)`) on an eyas extraction, with eyas's validation rows held out, then `eyas fix-keys`.

What runs here is speculators' real code: its config resolution, vocab mapping, draft construction, loaders,
`Trainer` (2 epochs) and checkpointer. On CPU the driver swaps what speculators hard-wires to an accelerator
(trainer.py:80/92 `torch.accelerator.synchronize`, trainer.py:221/228 the device) and picks SDPA attention
and the eager loss (FlexAttention has no CPU backward; the fused losses are GPU Triton kernels).
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from bench import speculators_side_by_side as driver
from contract.params.extract import ExtractParams
from drafting.context import RecordingSink, StageContext
from drafting.ml._dataset import read_dataset_rows
from drafting.ml.hidden_store import read_manifest
from drafting.ml.train_data import split_indices
from drafting.stages import extract
from tests.ml.speculators_offline import offline_loaders
from testsupport.tiny_targets import chat, random_target, write_jsonl

HIDDEN = 32  # testsupport.tiny_targets' target
SAMPLES = 16
PIN_MEMORY = "ignore:'pin_memory' argument is set as true:UserWarning"  # speculators' loaders; no accelerator


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny target and eyas's real extract stage's output for it (bf16)."""
    root = tmp_path_factory.mktemp("sbs")
    target = random_target(root / "target")
    rng = random.Random(3)
    records: list[Any] = [chat(rng, turns=1 + i % 3, words=3 + i % 6) for i in range(SAMPLES)]
    params = ExtractParams(
        target=str(target), data=str(write_jsonl(root / "data.jsonl", records)), output=str(root / "hs"),
        max_len=64, batch_size=4, dtype="bfloat16", device="cpu", writer_threads=2,
    )  # fmt: skip
    extract.run(StageContext(work_dir=root, sink=RecordingSink()), params)
    return target, root / "hs"


def test_an_eyas_extraction_has_nothing_speculators_cannot_read(made: tuple[Path, Path]) -> None:
    assert driver.reading_problems(made[1], HIDDEN) == []


def _token_ids_changed(hs: Path) -> None:
    path = hs / "hidden_states" / "hs_2.safetensors"
    tensors = load_file(path)
    tensors["token_ids"] = tensors["token_ids"].flip(0).contiguous()
    save_file(tensors, path)


def _three_states(hs: Path) -> None:
    path = hs / "hidden_states" / "hs_1.safetensors"
    tensors = load_file(path)
    tensors["hidden_states"] = tensors["hidden_states"][:, :3].contiguous()
    save_file(tensors, path)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda hs: (hs / "hidden_states" / "hs_3.safetensors").unlink(),
            "hidden_states/hs_3.safetensors missing",
        ),
        (_token_ids_changed, "hidden_states/hs_2.safetensors: token_ids differ from row 2's input_ids"),
        (
            _three_states,
            f"hidden_states/hs_1.safetensors: hidden_states [{{n}}, 3, {HIDDEN}], speculators needs",
        ),
        (lambda hs: (hs / "token_freq.pt").unlink(), "token_freq.pt unreadable"),
    ],
)
def test_what_speculators_could_not_read_is_named(
    made: tuple[Path, Path], tmp_path: Path, damage: Any, message: str
) -> None:
    hs = Path(shutil.copytree(made[1], tmp_path / "hs"))
    damage(hs)
    ids, _ = read_dataset_rows(hs)
    problems = driver.reading_problems(hs, HIDDEN)
    assert len(problems) == 1
    assert problems[0].startswith(message.format(n=len(ids[1])))


@pytest.mark.filterwarnings(PIN_MEMORY)
def test_speculators_loaders_hold_out_eyas_validation_rows_and_pack_what_eyas_wrote(
    made: tuple[Path, Path], tmp_path: Path
) -> None:
    """The view's split is eyas's `split_indices`; each packed batch is one row of total_seq_len tokens whose
    documents are eyas's samples, shifted by one (speculators' loss mask is the *input* token's)."""
    target, hs = made
    view = driver.make_view(hs, tmp_path / "view", val_fraction=0.25, seed=5)
    train_rows, val_rows = split_indices(SAMPLES, 0.25, 5)
    assert (view["train_rows"], view["val_rows"]) == (train_rows, val_rows)
    seq_len = driver.total_seq_len(view["lengths"], train_rows, batch_size=3)
    assert seq_len % 128 == 0
    assert seq_len >= max(view["lengths"])
    ids, masks = read_dataset_rows(hs)

    train, val = offline_loaders(
        tmp_path / "view", target, total_seq_len=seq_len, train_data_ratio=view["ratio"]
    )
    for loader, rows in ((train, train_rows), (val, val_rows)):
        seen: Counter[tuple[int, ...]] = Counter()
        for batch in loader:
            assert batch["input_ids"].shape == batch["loss_mask"].shape == (1, seq_len)
            assert batch["hidden_states"].shape == (1, seq_len, 3 * HIDDEN)
            assert batch["verifier_last_hidden_states"].shape == (1, seq_len, HIDDEN)
            docs = batch["document_ids"][0]
            assert (docs[int((docs >= 0).sum()) :] == -1).all()  # padding only after the documents
            for doc in range(int(docs.max()) + 1):
                got = batch["input_ids"][0][docs == doc].tolist()
                row = next(i for i in rows if ids[i][1:] == got)  # the sample, its first token dropped
                assert batch["loss_mask"][0][docs == doc].tolist() == masks[row][1:]
                seen[tuple(got)] += 1
        assert seen == Counter(tuple(ids[i][1:]) for i in rows)  # every row of the split once, no other


def _args(made: tuple[Path, Path], out: Path, *extra: str) -> Any:
    target, hs = made
    flags = ["--device", "cpu", "--epochs", "2", "--ttt-steps", "3", "--batch-size", "4"]
    return driver.parse([str(hs), str(target), str(out), *flags, "--draft-vocab-size", "40", *extra])


def test_the_speculators_config_is_eyas_schedule_and_what_sglang_serves(
    made: tuple[Path, Path], tmp_path: Path
) -> None:
    from speculators.train.config import TrainConfig

    args = _args(made, tmp_path / "out", "--", "--no-norm-output")
    manifest = read_manifest(made[1])
    assert manifest is not None
    cfg = TrainConfig.resolve(
        driver.speculators_argv(args, made[1], manifest["aux_layers"], 256, 0.8)
    ).flatten()
    expected = {
        "speculator_type": "eagle3",
        "optimizer": "adamw",
        "lr": 3e-4,
        "weight_decay": 0.0,
        "scheduler_type": "cosine",
        "scheduler_warmup_ratio": 0.015,
        "ttt_steps": 3,
        "ttt_step_loss_decay": 0.8,
        "epochs": 2,
        "draft_vocab_size": 40,
        "target_layer_ids": manifest["aux_layers"],
        "on_missing": "raise",
        "norm_before_residual": False,
        "norm_before_fc": False,
        "norm_output": False,  # from the flags after "--" (speculators' default is True)
        "full_attention_indices": [0],
        "total_seq_len": 256,
        "train_data_ratio": 0.8,
    }
    assert {key: cfg[key] for key in expected} == expected
    # On a GPU speculators compiles and autotunes; --eager gives it the CPU's attention and loss there too
    on_gpu = driver.parse([str(made[1]), str(made[0]), str(tmp_path / "gpu"), "--device", "cuda"])
    eager = driver.parse([str(made[1]), str(made[0]), str(tmp_path / "gpu"), "--device", "cuda", "--eager"])
    gpu_argv, eager_argv = (driver.speculators_argv(a, made[1], [1, 2, 3], 256, 0.8) for a in (on_gpu, eager))
    assert "--draft-attn-impl" not in gpu_argv
    assert eager_argv[-4:] == ["--draft-attn-impl", "sdpa", "--loss-implementation", "eager"]


@pytest.mark.filterwarnings(PIN_MEMORY)
def test_the_driver_trains_both_and_hands_sglang_the_speculators_draft(
    made: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = _args(made, out, "--eyas", "--val-fraction", "0.25", "--eager")  # TorchDynamo off: runs the same
    assert driver.train_main(args) == 0
    run = json.loads((out / "speculators_run.json").read_text())
    spec = run["speculators"]

    lengths = [len(row) for row in read_dataset_rows(made[1])[0]]
    train_rows, val_rows = split_indices(SAMPLES, 0.25, 0)
    assert run["split"]["val_rows"] == val_rows
    # every epoch trained on exactly eyas's training rows, each shifted by one token
    assert spec["tokens"] == 2 * sum(lengths[i] - 1 for i in train_rows)
    assert spec["steps"] == 2 * run["settings"]["steps_per_epoch"] > 0
    assert len(spec["epoch_train_s"]) == 2
    assert spec["tokens_per_s"] == pytest.approx(spec["tokens"] / sum(spec["epoch_train_s"]))
    assert spec["peak_gpu_bytes"] is None  # no GPU here
    assert 0 <= spec["first_step_s"] < spec["epoch_train_s"][0]  # the run's first step (on a GPU: compiling)
    assert spec["compile_times"].startswith("TorchDynamo compilation metrics")  # nothing compiles on the CPU
    assert spec["compiled"] is False
    epochs_written = [json.loads(line) for line in (out / "val_epochs.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs_written] == [1, 2]  # each as it ended, for a run stopped later
    assert epochs_written[-1]["full_acc"] == spec["val"][-1]["full_acc"]
    assert {"lm_head.weight", "embed_tokens.weight"} <= set(spec["frozen"])  # speculators trains no lm_head
    assert run["draft_vocab_same_as_eyas"] is True
    assert [epoch["epoch"] for epoch in spec["val"]] == [1, 2] == [e["epoch"] for e in run["eyas"]["val"]]
    for epoch in spec["val"]:
        assert len(epoch["full_acc"]) == len(epoch["cond_acc"]) == 3
        assert all(0 <= a <= 1 for a in epoch["full_acc"] + epoch["cond_acc"])
        assert epoch["est_accept_len"] == {"d3": pytest.approx(1 + sum(epoch["full_acc"]))}
    first, last = (load_file(out / "checkpoints" / e / "model.safetensors") for e in ("0", "1"))
    assert not torch.equal(
        first["fc.weight"], last["fc.weight"]
    )  # the second epoch's steps moved the weights
    assert [len(epoch["full_acc"]) for epoch in run["eyas"]["val"]] == [3, 3]

    assert run["fix_keys"]["returncode"] == 0, run["fix_keys"]
    assert run["fix_keys"]["report"]["ok"] is True
    draft = Path(run["sglang_draft"])
    config = json.loads((draft / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [i - 1 for i in run_aux(made[1])]
    with safe_open(str(draft / "model.safetensors"), "pt") as stored:
        names = set(stored.keys())
    assert "midlayer.self_attn.q_proj.weight" in names
    assert not any(name.startswith("layers.") for name in names)


def run_aux(hs: Path) -> list[int]:
    manifest = read_manifest(hs)
    assert manifest is not None
    return list(manifest["aux_layers"])


def test_a_stalled_loader_dumps_every_threads_stack(capfd: pytest.CaptureFixture[str]) -> None:
    """speculators' trainer can log no step for minutes with nothing saying where it waits: the driver's
    loader re-arms a stack dump with every batch, so a stall longer than `stall_s` is logged."""

    def slow_batches() -> Any:
        yield {"document_ids": torch.tensor([[0, 0, -1]])}
        import time

        time.sleep(1.0)  # the stall under test: longer than stall_s, the dump fires meanwhile
        yield {"document_ids": torch.tensor([[0, -1, -1]])}

    record: dict[str, Any] = {"tokens": 0, "steps": 0, "stall_s": 0.3}
    try:
        assert len(list(driver._CountingLoader(slow_batches(), record))) == 2
    finally:
        import faulthandler

        faulthandler.cancel_dump_traceback_later()
    assert (record["tokens"], record["steps"]) == (3, 2)
    dumped = capfd.readouterr().err
    assert "[driver] batch 1 handed to the trainer (2 tokens" in dumped  # the first batch is always said
    assert "most recent call first" in dumped, dumped[-2000:]
    assert "slow_batches" in dumped, dumped[-2000:]


def test_a_loader_that_keeps_up_dumps_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    record: dict[str, Any] = {"tokens": 0, "steps": 0, "stall_s": 5.0}
    try:
        batches = [{"document_ids": torch.tensor([[0, -1]])} for _ in range(3)]
        assert len(list(driver._CountingLoader(iter(batches), record))) == 3
    finally:
        import faulthandler

        faulthandler.cancel_dump_traceback_later()
    assert "most recent call first" not in capfd.readouterr().err
