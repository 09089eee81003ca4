"""The train stage on a target whose next token is a fixed function of the current one."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from contract.params.train import TrainParams
from contract.reasons import TerminationReason
from drafting.checkpoint import diagnose
from drafting.context import RecordingSink, StageCancelled, StageContext, StageError
from drafting.findings import errors_in
from drafting.ml.hidden_store import hidden_path, write_safetensors
from drafting.ml.train_state import load_state
from drafting.stages import train
from tests.ml.stage_process import run_stage_process
from testsupport.tiny_targets import cpu_train_params, random_target, successor_extraction

DRAFT_VOCAB = 48


@pytest.fixture(scope="module")
def learnable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, extraction) for the successor task, extracted once for the module."""
    root = tmp_path_factory.mktemp("learnable")
    return successor_extraction(root, conversations=40, turns=2, words=12, seed=1, max_len=96)


def _params(target: Path, data: Path, output: Path, **overrides: Any) -> TrainParams:
    values = {
        "epochs": 2, "ttt_steps": 3, "batch_size": 2, "lr": 1e-2, "warmup_steps": 0, "schedule": "cosine",
        "draft_vocab_size": DRAFT_VOCAB, "val_fraction": 0.2, **overrides,
    }  # fmt: skip
    return cpu_train_params(target, data, output, **values)


def _train(params: TrainParams, sink: RecordingSink | None = None) -> tuple[dict[str, Any], RecordingSink]:
    sink = sink or RecordingSink()
    ctx = StageContext(work_dir=Path(params.output).parent, sink=sink)
    if isinstance(sink, _CancelAtStep):
        sink.cancel = ctx.cancel
    return train.run(ctx, params), sink


def _series(sink: RecordingSink, name: str) -> dict[int, float]:
    return {e["step"]: e["value"] for e in sink.of_type("metric") if e["name"] == name}


@dataclass
class _CancelAtStep(RecordingSink):
    stop_after: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)

    def emit(self, event: dict[str, Any]) -> None:
        super().emit(event)
        if event["type"] == "metric" and event["name"] == "train/loss" and event["step"] >= self.stop_after:
            self.cancel.set()


def test_loss_falls_and_step0_accuracy_rises_far_above_chance(
    learnable: tuple[Path, Path], tmp_path: Path
) -> None:
    target, data = learnable
    # A random lm_head learns this toy task fastest: the toy target's own head is extremely sharp.
    result, sink = _train(_params(target, data, tmp_path / "run", epochs=4, init_lm_head="random"))
    losses = _series(sink, "train/loss")
    steps = sorted(losses)
    assert losses[steps[-1]] < 0.3 * losses[steps[0]]
    val_acc = _series(sink, "val/acc_0")
    assert max(val_acc.values()) > 0.8  # chance is 1/48
    assert _series(sink, "val/acc_2")[max(val_acc)] > 0.5  # the unrolled steps learn the rule too
    tau = _series(sink, "val/est_accept_len")[max(val_acc)]
    assert 2.5 < tau <= 4.0  # 1 + sum of 3 cumulative accuracies
    assert result["epochs_done"] == 4
    assert result["peak_gpu_bytes"] is None  # the key is there; a CPU run holds no GPU memory
    # every training sample ran the full-vocab head once, in the first epoch; the later ones read its argmax
    head, steps = result["target_head"], len(_series(sink, "train/loss"))
    assert head["samples_kept"] == result["samples"]["train"]
    assert head["steps_full_head"] + head["steps_draft_rows"] == steps
    assert 0 < head["steps_full_head"] <= steps // 4 < head["steps_draft_rows"], (head, steps)
    assert {f"train/acc_{k}" for k in range(3)} <= {e["name"] for e in sink.of_type("metric")}
    assert {"train/lr", "train/tokens_per_s", "train_epoch/acc_0"} <= {
        e["name"] for e in sink.of_type("metric")
    }
    drafters = [a for a in sink.of_type("artifact") if a["kind"] == "drafter"]
    assert [a["path"] for a in drafters] == [str(tmp_path / "run" / f"epoch_{e}") for e in (1, 2, 3, 4)]
    best = [a for a in sink.of_type("artifact") if a["kind"] == "best_drafter"]
    assert [a["path"] for a in best] == [result["selected"]]


def test_resume_continues_at_the_same_step_with_the_same_loss(
    learnable: tuple[Path, Path], tmp_path: Path
) -> None:
    target, data = learnable
    _, uninterrupted = _train(_params(target, data, tmp_path / "a"))
    reference = _series(uninterrupted, "train/loss")

    params = _params(target, data, tmp_path / "b")
    with pytest.raises(StageCancelled):
        _train(params, _CancelAtStep(stop_after=5))
    _, resumed = _train(params)
    continued = _series(resumed, "train/loss")
    assert min(continued) == 6  # the first step after the five that were saved
    assert set(continued) == {s for s in reference if s >= 6}
    for step, loss in continued.items():
        assert loss == pytest.approx(reference[step], rel=1e-5, abs=1e-6)


def test_a_killed_run_resumes_from_its_last_periodic_save_with_the_same_losses(
    learnable: tuple[Path, Path], tmp_path: Path
) -> None:
    """SIGKILL (a lost worker, the OOM killer) gives no chance to save: the periodic in-epoch save must, and
    what it saved must continue the run exactly."""
    target, data = learnable
    _, uninterrupted = _train(_params(target, data, tmp_path / "a"))
    reference = _series(uninterrupted, "train/loss")

    params = _params(target, data, tmp_path / "b", state_every_s=0.0)  # save after every step
    killed = run_stage_process("train", params, tmp_path, kill_when=lambda line: line.startswith("step 7 "))
    assert killed.result.exit_code == -9, killed.log
    saved = load_state(tmp_path / "b")
    assert saved is not None
    step = saved["position"]["global_step"]
    # "step 7" is logged just before step 7's save: the kill keeps step 6 or 7, mid-epoch one (the first
    # epoch-end save would be step 16)
    assert 6 <= step < max(reference) // 2
    _, resumed = _train(params)
    continued = _series(resumed, "train/loss")
    assert min(continued) == step + 1
    for at, loss in continued.items():
        assert loss == pytest.approx(reference[at], rel=1e-5, abs=1e-6)


def test_checkpoint_is_what_sglang_loads(learnable: tuple[Path, Path], tmp_path: Path) -> None:
    target, data = learnable
    result, _ = _train(_params(target, data, tmp_path / "run", epochs=1))
    checkpoint = Path(result["checkpoint"])
    assert sorted(p.name for p in checkpoint.iterdir()) == ["config.json", "model.safetensors"]
    shapes = {name: tuple(t.shape) for name, t in load_file(checkpoint / "model.safetensors").items()}
    h, i = 64, 128
    assert shapes == {
        "fc.weight": (h, 3 * h),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (h, 2 * h),
        "midlayer.self_attn.k_proj.weight": (h // 2, 2 * h),
        "midlayer.self_attn.v_proj.weight": (h // 2, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, h),
        "midlayer.mlp.gate_proj.weight": (i, h),
        "midlayer.mlp.up_proj.weight": (i, h),
        "midlayer.mlp.down_proj.weight": (h, i),
        "norm.weight": (h,),
        "lm_head.weight": (DRAFT_VOCAB, h),
        "d2t": (DRAFT_VOCAB,),
    }
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    report = diagnose(checkpoint, target=target)
    assert errors_in(report.findings) == []


def test_extraction_of_another_target_is_refused(learnable: tuple[Path, Path], tmp_path: Path) -> None:
    _, data = learnable
    other = random_target(tmp_path / "other", hidden_size=48, num_attention_heads=4, num_key_value_heads=2)
    with pytest.raises(StageError) as caught:
        _train(_params(other, data, tmp_path / "run"))
    assert caught.value.reason == TerminationReason.DATA_MISMATCH
    assert "hidden_size 64 in the extraction, 48 in the target" in caught.value.message


def test_non_finite_states_stop_with_nan_loss(learnable: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    target, data = learnable
    corrupt = tmp_path / "hs"
    shutil.copytree(data, corrupt)
    for path in (corrupt / "hidden_states").iterdir():
        stored = load_file(path)
        stored["hidden_states"][:, :3] = float("nan")
        write_safetensors(path, stored)
    assert torch.isnan(load_file(hidden_path(corrupt, 0))["hidden_states"]).any()
    with pytest.raises(StageError) as caught:
        _train(_params(target, corrupt, tmp_path / "run"))
    assert caught.value.reason == TerminationReason.NAN_LOSS
    assert caught.value.details["step"] == 0


def test_a_used_output_is_not_overwritten(learnable: tuple[Path, Path], tmp_path: Path) -> None:
    target, data = learnable
    _train(_params(target, data, tmp_path / "run", epochs=1, max_steps=2))
    with pytest.raises(StageError, match="already holds a training run"):
        _train(_params(target, data, tmp_path / "run", epochs=1, resume=False))
    with pytest.raises(StageError) as caught:
        _train(_params(target, data, tmp_path / "run", epochs=1, lr=1e-3))
    assert caught.value.details["changed"] == ["lr"]


def test_needs_gpus_follows_the_device(tmp_path: Path) -> None:
    assert _params(tmp_path, tmp_path, tmp_path, device="cuda").needs_gpus()
    assert not _params(tmp_path, tmp_path, tmp_path).needs_gpus()
