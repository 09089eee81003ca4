"""Out of memory on a real GPU: the extract and train stages given batches that cannot fit fail with
OUT_OF_MEMORY naming the batch that failed, release the GPU memory, and the same process then trains with
a smaller batch. A random 1.3B Llama target (testsupport/random_llama.py) with the demo's tokenizer,
conversations of about 2,000 tokens."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from contract.params.extract import ExtractParams
from contract.params.train import TrainParams
from contract.reasons import TerminationReason
from drafting.context import RecordingSink, StageContext, StageError
from drafting.stages import extract, train
from tests.gpu._child import in_child
from testsupport.random_llama import LLAMA_1_5B_VOCAB_32K, long_conversations, save_random_llama


def attempt(run: Any) -> dict[str, Any]:
    """The stage's outcome, then the GPU memory torch still holds once its objects are gone."""
    import torch

    try:
        result = run()
        outcome: dict[str, Any] = {"outcome": "succeeded", "global_step": result.get("global_step")}
    except StageError as exc:
        outcome = {"outcome": "failed", "reason": str(exc.reason), "message": exc.message}
    gc.collect()
    torch.cuda.empty_cache()
    outcome["allocated_after_gib"] = torch.cuda.memory_allocated() / 2**30
    return outcome


def oom_paths(root: Path) -> dict[str, dict[str, Any]]:
    """The four attempts in one process (the child's): extract too big, extract, train too big, train."""
    ctx = StageContext(work_dir=root, sink=RecordingSink())
    target = save_random_llama(root / "target", LLAMA_1_5B_VOCAB_32K)
    huge = long_conversations(root / "huge.jsonl", 1024, 2000)  # ~4M tokens in one batch: cannot fit
    big = ExtractParams(
        target=str(target), data=str(huge), output=str(root / "hs_huge"), batch_size=1024, max_len=4096,
        disk_free_override_bytes=10**15,
    )  # fmt: skip
    data = long_conversations(root / "chats.jsonl", 96, 1000)
    fits = ExtractParams(target=str(target), data=str(data), output=str(root / "hs"), max_len=2048)
    common = {"data": str(root / "hs"), "target": str(target), "max_len": 2048, "draft_vocab_size": 32000}
    too_many = TrainParams(**common, output=str(root / "run_big"), batch_size=96, val_fraction=0)
    small = TrainParams(**common, output=str(root / "run_small"), batch_size=2, max_steps=4)
    return {
        "extract_oom": attempt(lambda: extract.run(ctx, big)),
        "extract": attempt(lambda: extract.run(ctx, fits)),
        "train_oom": attempt(lambda: train.run(ctx, too_many)),
        "train_after_oom": attempt(lambda: train.run(ctx, small)),
    }


def test_too_large_a_batch_fails_naming_it_frees_the_gpu_and_a_smaller_one_then_runs(tmp_path: Path) -> None:
    out = in_child(oom_paths, tmp_path)
    for name in ("extract_oom", "train_oom"):
        failed = out[name]
        assert failed["outcome"] == "failed", failed
        assert failed["reason"] == str(TerminationReason.OUT_OF_MEMORY), failed
        assert "batch" in failed["message"], failed["message"]
        assert failed["allocated_after_gib"] < 0.5, failed  # the failed batch's memory is released
    assert out["extract"]["outcome"] == "succeeded", out["extract"]
    assert out["train_after_oom"]["outcome"] == "succeeded", out["train_after_oom"]
    assert out["train_after_oom"]["global_step"] == 4
