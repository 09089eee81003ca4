"""The train stage validating on a held-out extraction (held_out_data): held_out/ metrics every epoch, the
best epoch chosen by them, and held-out extractions the drafter could not read refused."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contract.params.extract import ExtractParams
from contract.reasons import TerminationReason
from drafting.context import RecordingSink, StageContext, StageError
from drafting.ml.checkpoint_choice import choose
from drafting.ml.hidden_store import read_manifest
from drafting.ml.train_data import training_subset
from drafting.ml.train_state import load_state
from drafting.stages import extract, train
from testsupport.tiny_targets import WORDS, cpu_train_params, random_target, successor_target, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
TRAIN_WORDS, HELD_OUT_WORDS = WORDS[:20], WORDS[20:]  # the held-out prompts' style differs from training's


def _extract(root: Path, target: Path, name: str, pool: list[str], n: int, seed: int, **values: Any) -> Path:
    """An extraction of `n` two-turn conversations whose words all come from `pool`."""
    rng = random.Random(seed)

    def text() -> str:
        return " ".join(rng.choice(pool) for _ in range(12))

    chats = [
        {"messages": [{"role": role, "content": text()} for role in ("user", "assistant") * 2]}
        for _ in range(n)
    ]
    data = write_jsonl(root / f"{name}.jsonl", chats)
    output = root / name
    params = ExtractParams(
        target=str(target), data=str(data), output=str(output), device="cpu", dtype="float32", max_len=96,
        **values,
    )  # fmt: skip
    extract.run(StageContext(work_dir=root), params)
    return output


@pytest.fixture(scope="module")
def extractions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The successor target, a training extraction of its first 20 words and a held-out one of the others."""
    root = tmp_path_factory.mktemp("held_out")
    target = successor_target(root / "target")
    return {
        "target": target,
        "data": _extract(root, target, "train", TRAIN_WORDS, 40, seed=1),
        "held_out": _extract(root, target, "held_out", HELD_OUT_WORDS, 12, seed=2),
    }


def _params(x: dict[str, Path], output: Path, **overrides: Any) -> Any:
    values = {
        "epochs": 3, "ttt_steps": 3, "batch_size": 2, "lr": 1e-2, "warmup_steps": 0, "schedule": "constant",
        "draft_vocab_size": 48, "val_fraction": 0.2, "init_lm_head": "random",
        "held_out_data": str(x["held_out"]), **overrides,
    }  # fmt: skip
    # The pre-norm state fed back (eyas's default before GPU run 14): on this constructed target, in 3 epochs,
    # it is what makes the held-out estimate move between epochs, which the epoch choice is tested on; with
    # norm_output the held-out words stay at one flat estimate and every epoch ties.
    values.setdefault("norm_output", False)
    return cpu_train_params(x["target"], x["data"], output, **values)


def _run(params: Any) -> tuple[dict[str, Any], RecordingSink]:
    sink = RecordingSink()
    return train.run(StageContext(work_dir=Path(params.output).parent, sink=sink), params), sink


def test_choose_prefers_the_held_out_estimate_over_the_split() -> None:
    epochs = [
        {"epoch": 1.0, "val/est_accept_len_d3": 2.5, "held_out/est_accept_len_d3": 1.2},
        {"epoch": 2.0, "val/est_accept_len_d3": 2.1, "held_out/est_accept_len_d3": 1.4},
        {"epoch": 3.0, "val/est_accept_len_d3": 2.0, "held_out/est_accept_len_d3": 1.3},
    ]
    chosen = choose(epochs, depth=3, keep="best")
    split_only = choose(
        [{k: v for k, v in e.items() if not k.startswith("held_out/")} for e in epochs], depth=3, keep="best"
    )
    assert chosen is not None
    assert split_only is not None
    assert (chosen.epoch, chosen.best) == (
        2,
        {"epoch": 2, "accept_len": 1.4, "depth": 3, "source": "held_out", "metric": "est_accept_len_d3"},
    )
    assert (split_only.epoch, split_only.best) == (
        1,
        {"epoch": 1, "accept_len": 2.5, "depth": 3, "source": "val", "metric": "est_accept_len_d3"},
    )
    # no split (val_fraction 0): the held-out estimate alone still picks; an older record from full_acc_k
    older = [{"epoch": 1.0, "held_out/full_acc_0": 0.5, "held_out/full_acc_1": 0.25}, {"epoch": 2.0}]
    picked = choose(older, depth=2, keep="best")
    assert picked is not None
    assert picked.best == {
        "epoch": 1,
        "accept_len": 1.75,
        "depth": 2,
        "source": "held_out",
        "metric": "est_accept_len_d2",
    }


def test_a_run_validates_on_the_held_out_extraction_and_picks_its_best_epoch_by_it(
    extractions: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "run"
    result, sink = _run(_params(extractions, output))
    epochs = result["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    for epoch in epochs:  # the same metrics as the split's, under held_out/
        val = {k.removeprefix("val/") for k in epoch if k.startswith("val/")}
        held_out = {k.removeprefix("held_out/") for k in epoch if k.startswith("held_out/")}
        assert held_out == val
        assert {
            "loss",
            "acc_0",
            "full_acc_2",
            "est_accept_len_d3",
            "sim_accept_len",
            "sim_accept_len_d3",
        } <= held_out
    reported = [e for e in sink.of_type("metric") if e["name"] == "held_out/sim_accept_len_d3"]
    assert [e["value"] for e in reported] == [e["held_out/sim_accept_len_d3"] for e in epochs]
    # Trained on the first 20 words, the drafter predicts their successors well and the others' badly: the
    # split (same words as training) overstates acceptance on the held-out prompts.
    last = epochs[-1]
    assert last["val/acc_0"] > 0.8, last
    assert last["held_out/acc_0"] < last["val/acc_0"] - 0.3, last
    assert last["held_out/est_accept_len_d3"] < last["val/est_accept_len_d3"] - 0.5, last
    # the best epoch: the highest held-out simulated acceptance at depth 3 (ties to the later epoch). Here
    # the split's rises every epoch (it would hand on epoch 3) while the held-out one does not: they disagree.
    estimates = [e["held_out/sim_accept_len_d3"] for e in epochs]
    split = [e["val/sim_accept_len_d3"] for e in epochs]
    assert split == sorted(split), split
    assert split[-1] > split[0] + 1.0, split
    best = max(range(3), key=lambda i: (estimates[i], i)) + 1
    assert best != 3, estimates
    assert result["best"] == {
        "epoch": best, "accept_len": estimates[best - 1], "depth": 3, "source": "held_out",
        "metric": "sim_accept_len_d3", "checkpoint": str(output / f"epoch_{best}"),
    }  # fmt: skip
    assert result["selected"] == str(output / f"epoch_{best}")
    handed_on = [e["path"] for e in sink.of_type("artifact") if e["kind"] == "best_drafter"]
    assert handed_on == [str(output / f"epoch_{best}")]
    recorded = json.loads((output / "run.json").read_text())["epochs"]
    assert [e["held_out/sim_accept_len_d3"] for e in recorded] == estimates
    # the held-out set is part of the run's definition: its epochs are compared with each other
    state = load_state(output)
    assert state is not None
    assert state["fingerprint"]["held_out"] == read_manifest(extractions["held_out"])["fingerprint"]
    with pytest.raises(StageError) as caught:
        _run(_params(extractions, output, held_out_data=None))
    assert (caught.value.reason, caught.value.details["changed"]) == (
        TerminationReason.DATA_MISMATCH,
        ["held_out"],
    )
    again, _ = _run(_params(extractions, output))  # the same held-out set: the finished run answers again
    assert again["best"] == result["best"]


def test_without_a_held_out_set_the_split_chooses_and_the_fingerprint_is_unchanged(
    extractions: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "run"
    result, sink = _run(_params(extractions, output, epochs=1, held_out_data=None))
    assert not [e for e in sink.of_type("metric") if e["name"].startswith("held_out/")]
    assert result["best"]["source"] == "val"
    assert result["best"]["accept_len"] == result["epochs"][0]["val/sim_accept_len_d3"]
    state = load_state(output)
    assert state is not None
    assert "held_out" not in state["fingerprint"]  # states saved before held_out_data existed still resume


def test_with_no_split_the_held_out_set_alone_validates_and_chooses(
    extractions: dict[str, Path], tmp_path: Path
) -> None:
    result, sink = _run(_params(extractions, tmp_path / "run", epochs=1, val_fraction=0.0))
    names = {e["name"] for e in sink.of_type("metric")}
    assert {"held_out/est_accept_len_d3", "held_out/sim_accept_len_d3"} <= names
    assert not [n for n in names if n.startswith("val/")]
    epoch = result["epochs"][0]
    assert result["best"]["source"] == "held_out"
    assert result["best"]["accept_len"] == epoch["held_out/sim_accept_len_d3"]
    assert 1.0 <= epoch["held_out/sim_accept_len_d3"] <= 4.0


def _empty_copy(extraction: Path, folder: Path) -> Path:
    from datasets import load_from_disk

    load_from_disk(str(extraction)).select([]).save_to_disk(str(folder), num_shards=1)
    for name in ("eyas_manifest.json", "token_freq.pt"):
        shutil.copy(extraction / name, folder / name)
    (folder / "hidden_states").mkdir()
    manifest = json.loads((folder / "eyas_manifest.json").read_text())
    manifest["fingerprint"] = "another"
    (folder / "eyas_manifest.json").write_text(json.dumps(manifest))
    return folder


def test_a_held_out_extraction_the_drafter_cannot_read_is_refused(
    extractions: dict[str, Path], tmp_path: Path
) -> None:
    target = extractions["target"]
    other_layers = _extract(tmp_path, target, "layers", HELD_OUT_WORDS, 4, seed=3, aux_layers=[1, 3, 6])
    other = random_target(
        tmp_path / "other-target", hidden_size=48, num_attention_heads=4, num_key_value_heads=2
    )
    other_target = _extract(tmp_path, other, "other", HELD_OUT_WORDS, 4, seed=3)
    cases = {
        other_layers: f"does not match the training extraction {extractions['data']}: "
        "aux_layers [1, 3, 6] in the held-out extraction, [2, 4, 5] in the training one",
        other_target: "hidden_size 48 in the extraction, 64 in the target",
        extractions["data"]: "is an extraction of the training data itself",
        _empty_copy(extractions["held_out"], tmp_path / "empty"): "holds no samples",
    }
    for folder, message in cases.items():
        with pytest.raises(StageError) as caught:
            _run(_params(extractions, tmp_path / f"run-{folder.name}", held_out_data=str(folder)))
        assert caught.value.reason == TerminationReason.DATA_MISMATCH
        assert f"held_out_data {folder}" in caught.value.message
        assert message in caught.value.message
        assert not (tmp_path / f"run-{folder.name}" / "run.json").exists()  # refused before any training


def test_training_subsets_of_one_seed_are_nested_and_sorted() -> None:
    rows = list(range(0, 200, 2))
    small, large = training_subset(rows, 10, seed=4), training_subset(rows, 40, seed=4)
    assert len(small) == 10
    assert len(large) == 40
    assert set(small) <= set(large), "a data-size curve grows one set of samples"
    assert small == sorted(small)
    assert set(large) <= set(rows)
    assert training_subset(rows, None, seed=4) == rows
    assert training_subset(rows, 500, seed=4) == rows
    assert training_subset(rows, 10, seed=5) != small, "another seed, other samples"


def test_train_samples_trains_on_that_many_and_keeps_the_validation_rows(
    extractions: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full, _ = _run(_params(extractions, tmp_path / "full", epochs=1))
    some, _ = _run(_params(extractions, tmp_path / "some", epochs=1, train_samples=10))
    assert full["samples"] == {"train": 32, "val": 8, "held_out": 12}
    assert some["samples"] == {"train": 10, "val": 8, "held_out": 12}
    assert some["total_steps"] == 5  # 10 samples in batches of 2
    assert full["total_steps"] == 16
    assert load_state(tmp_path / "some")["fingerprint"]["train_samples"] == 10
    assert "train_samples" not in load_state(tmp_path / "full")["fingerprint"]
    assert "training on 10 samples (train_samples 10)" in capsys.readouterr().out


def test_recipes_bench_trains_variants_side_by_side_on_one_extraction(
    extractions: dict[str, Path], tmp_path: Path
) -> None:
    """`python -m bench.recipes` on the CPU: three variants, two at a time, each in its own process, every
    epoch's held-out and split estimates reported; the base given as a file (as `bench.journey run` writes
    the pipeline's train params), its paths replaced by the command's; a variant whose params the train
    stage refuses is reported failed with its log, beside the others (a plumbing check of the module; the
    GPU run is what it is for)."""
    base = {"epochs": 2, "ttt_steps": 3, "batch_size": 2, "lr": 1e-2, "warmup_steps": 0, "max_len": 96,
            "draft_vocab_size": 48, "val_fraction": 0.2, "device": "cpu", "dtype": "float32",
            "loader_workers": 0, "init_lm_head": "random", "data": "/elsewhere/data",
            "output": "/elsewhere/run"}  # fmt: skip
    (tmp_path / "train_params.json").write_text(json.dumps(base))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bench.recipes", str(extractions["data"]), str(extractions["target"])]
    command += [str(out), "--held-out", str(extractions["held_out"]), "--parallel", "2"]
    command += ["--base", f"@{tmp_path / 'train_params.json'}"]
    command += ["--variant", "all={}", "--variant", 'few={"train_samples": 8}', "--variant", 'bad={"lr": -1}']
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "recipes.json").read_text())
    assert set(report["variants"]) == {"all", "few", "bad"}
    assert report["base"]["data"] == str(extractions["data"])  # the command's paths, not the file's
    refused = report["variants"].pop("bad")
    assert refused["returncode"] != 0
    assert "lr" in Path(refused["log"]).read_text()
    for name, run in report["variants"].items():
        assert run["returncode"] == 0, (out / f"{name}.log").read_text()[-3000:]
        assert [e["epoch"] for e in run["epochs"]] == [1, 2]
        for epoch in run["epochs"]:
            assert set(epoch["held_out"]) == {"sim_d3", "est_d3", "acc_0"}
            assert epoch["held_out"]["sim_d3"] >= 1.0
            assert set(epoch["val"]) == {"sim_d3", "est_d3", "acc_0"}
        assert run["best"]["source"] == "held_out"
    assert json.loads((out / "all.params.json").read_text())["output"] == str(out / "all")
    assert report["variants"]["few"]["overrides"] == {"train_samples": 8}
    assert json.loads((out / "few.params.json").read_text())["train_samples"] == 8
