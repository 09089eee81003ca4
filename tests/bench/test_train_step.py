"""bench.train_step's profile and yardstick options on the CPU (--small): where a step's time goes by kind,
and bench.train_yardstick run after eyas's steps in the same command, with eyas's share of it. A plumbing
check of the module at a small shape: the GPU figures are in docs/benchmarks.md."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import train_step
from bench._drafter_shapes import SMALL
from bench._step_profile import timed_rows

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_train_step_profiles_its_steps_and_runs_the_yardstick_beside_them() -> None:
    command = [
        sys.executable,
        "-m",
        "bench.train_step",
        "--small",
        "--profile",
        "--stage-recipe",
        "--yardstick",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    profile = result["profile"]
    assert profile["clock"].startswith("cpu")
    assert profile["ms_per_step"] > 0
    shares = profile["share_by_kind"]
    assert shares["matmul"] > 0  # the drafter's linears
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.01)
    assert 0 < len(profile["top"]) <= 12
    assert profile["top"][0]["ms_per_step"] >= profile["top"][-1]["ms_per_step"]
    by_kind = profile["top_by_kind"]
    assert "matmul" not in by_kind  # the overall top already names the GEMMs
    for kind, rows in by_kind.items():  # each kind's rows are its own, largest first, within its share
        assert 0 < len(rows) <= 6
        assert sum(row["share"] for row in rows) <= shares[kind] + 0.01
        assert [row["ms_per_step"] for row in rows] == sorted(
            (row["ms_per_step"] for row in rows), reverse=True
        )
    yardstick = result["yardstick"]  # the real plain-PyTorch step, at the same shape and sizes, eager
    measured = yardstick["result"]
    assert (measured["batch"], measured["seq"], measured["ttt"]) == (result["batch"], result["seq"], 7)
    assert measured["shape"] == result["shape"]
    assert yardstick["over"] == "eager"
    assert measured["eager"]["tokens_per_s"] > 0
    assert yardstick["eyas_over_yardstick"] == round(
        result["tokens_per_s"] / measured["eager"]["tokens_per_s"], 3
    )
    recipe = result["stage_recipe"]  # the train stage's defaults
    assert (recipe["norm_output"], recipe["train_lm_head"]) == (True, False)
    assert recipe["step_ms"] > 0
    assert recipe["over_yardstick"] == pytest.approx(
        recipe["tokens_per_s"] / measured["eager"]["tokens_per_s"], abs=0.002
    )


def test_the_stage_recipe_trainer_freezes_the_head_as_the_stage_does() -> None:
    args = argparse.Namespace(ttt=3, attention="dense", compile=False)
    cpu = torch.device("cpu")
    frozen = train_step.build(SMALL, args, cpu, torch.float32, {"norm_output": True, "train_lm_head": False})
    trained = train_step.build(SMALL, args, cpu, torch.float32)
    assert frozen.drafter.norm_output
    assert not trained.drafter.norm_output
    assert not frozen.drafter.lm_head.weight.requires_grad
    optimized = {id(p) for group in frozen.optimizer.param_groups for p in group["params"]}
    assert id(frozen.drafter.lm_head.weight) not in optimized
    assert id(trained.drafter.lm_head.weight) in {
        id(p) for g in trained.optimizer.param_groups for p in g["params"]
    }


def test_a_yardstick_that_fails_is_reported_not_hidden() -> None:
    report = train_step.run_yardstick([sys.executable, "-c", "raise SystemExit('no CUDA here')"], 1000.0)
    assert report["returncode"] == 1
    assert "no CUDA here" in report["error"]
    assert "eyas_over_yardstick" not in report


def test_the_cuda_profile_counts_each_kernel_once() -> None:
    """The rows a CUDA profile gives (built here as torch's own event objects: no GPU on this machine): an
    op's CPU row, the kernel it launched, and a record_function range's device row over that kernel. Only
    the kernel is device time of its own: a range's row counted too would count `Optimizer.step#AdamW.step`
    twice."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent, FunctionEventAvg

    def row(name: str, device: DeviceType, annotation: bool, device_us: int) -> FunctionEventAvg:
        event = FunctionEvent(
            id=0, name=name, thread=0, start_us=0, end_us=device_us, device_type=device,
            is_user_annotation=annotation,
        )  # fmt: skip
        average = FunctionEventAvg()
        average.add(event)
        average.self_device_time_total = device_us
        average.self_cpu_time_total = device_us
        return average

    rows = [
        row("aten::_fused_adamw_", DeviceType.CPU, False, 3400),
        row("multi_tensor_apply_kernel", DeviceType.CUDA, False, 3400),
        row("Optimizer.step#AdamW.step", DeviceType.CUDA, True, 3400),
    ]
    assert timed_rows(rows, cuda=True, steps=2) == [("multi_tensor_apply_kernel", 1.7)]
    on_cpu = timed_rows(rows, cuda=False, steps=2)  # the CPU clock: every op's own time
    assert [name for name, _ in on_cpu] == [r.key for r in rows]
