"""The train stage compiled and eager on a GPU, on conversations of several padded lengths: the compiled run
stays compiled (a static graph per padded length, no fall back to eager) and learns what the eager run
learns. The target is constructed (the successor rule, at SmolLM2-135M's width and depth), so a drafter
learns it in a few epochs: a plumbing check of the compiled path, not a quality claim. The speed of the
two: `python -m bench.train_stage`."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from cli.demo.constructed import successor_target, write_jsonl
from contract.params.extract import ExtractParams
from contract.params.train import TrainParams
from drafting.context import RecordingSink, StageContext
from drafting.stages import extract, train
from tests.gpu._child import in_child
from testsupport.successor_chats import successor_chat

HIDDEN, LAYERS = 576, 30  # SmolLM2-135M's width and depth


def train_both(work: Path) -> dict[str, Any]:
    import torch

    heads = HIDDEN // 64
    target = successor_target(
        work / "target", hidden=HIDDEN, heads=heads, kv_heads=max(1, heads // 3), layers=LAYERS,
        intermediate=round(2.67 * HIDDEN / 64) * 64, dtype=torch.bfloat16, device="cuda",
    )  # fmt: skip
    rng = random.Random(0)  # 1-2 turns of 8-60 words: three padded lengths
    chats = [successor_chat(rng, turns=rng.randint(1, 2), words=rng.randint(8, 60)) for _ in range(300)]
    data = write_jsonl(work / "chats.jsonl", chats)
    extract.run(
        StageContext(work_dir=work),
        ExtractParams(
            target=str(target), data=str(data), output=str(work / "hs"), device="cuda", max_len=1024
        ),
    )
    report: dict[str, Any] = {}
    for compiled in (True, False):
        name = "compiled" if compiled else "eager"
        params = TrainParams(
            target=str(target), data=str(work / "hs"), output=str(work / name), device="cuda", epochs=2,
            batch_size=8, lr=1e-3, ttt_steps=7, max_len=1024, draft_vocab_size=64, compile=compiled,
        )  # fmt: skip
        result = train.run(StageContext(work_dir=work, sink=RecordingSink()), params)
        last = result["epochs"][-1]
        report[name] = {
            "steps": result["global_step"],
            "compile": result["compile"],
            "val_acc_0": last["val/acc_0"],
            "val_sim_accept_len_d5": last["val/sim_accept_len_d5"],
        }
    return report


@pytest.mark.timeout(900)
def test_the_compiled_train_stage_stays_compiled_and_learns_what_eager_learns(tmp_path: Path) -> None:
    report = in_child(train_both, tmp_path)
    compiled, eager = report["compiled"], report["eager"]
    assert compiled["compile"] == {"requested": True, "used": True, "fell_back": None}, compiled
    assert eager["compile"]["used"] is False
    assert compiled["steps"] == eager["steps"] > 0
    assert compiled["val_acc_0"] == pytest.approx(eager["val_acc_0"], abs=0.05)
    assert compiled["val_sim_accept_len_d5"] == pytest.approx(eager["val_sim_accept_len_d5"], rel=0.05)
    assert eager["val_sim_accept_len_d5"] > 2  # the rule was learned, so the comparison says something
