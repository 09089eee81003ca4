"""How a sweep places its servers: interleaved beside the baseline when the target fits twice, the GPU's
memory shared so both servers get the same static pool, and the fall-back to one server at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contract.params.benchmark import BenchmarkParams, SpecConfig
from drafting.serving.benchmark.sweep_servers import (
    MAX_FRACTION,
    memory_back,
    plan_layout,
    server_spec,
    speculative_fraction,
    weights_mib,
)

H200_MIB = 143_771.0


def sweep(**launch: Any) -> BenchmarkParams:
    spec = {"engine": "sglang", "model": "/models/target", "draft": "/models/draft", "port": 30000, **launch}
    return BenchmarkParams.model_validate({"mode": "sweep", "launch": spec, "depths": [5]})


def test_a_small_target_on_one_gpu_is_interleaved_with_half_the_memory_each() -> None:
    layout = plan_layout(sweep(), "sglang", gpu_total_mib=H200_MIB, weights_mib=270.0)  # a 135M model
    assert layout.interleaved is True
    assert layout.share == pytest.approx(0.4), "half of the default 0.8 for the two servers together"
    assert layout.baseline_port == 30000
    assert layout.speculative_port != 30000
    assert "two servers share the GPU(s): mem_fraction_static 0.40 of GPU memory each" in layout.reason
    given = plan_layout(sweep(mem_fraction_static=0.7), "sglang", gpu_total_mib=H200_MIB, weights_mib=270.0)
    assert given.share == pytest.approx(0.35)


def test_a_target_that_cannot_fit_twice_is_measured_one_server_at_a_time_and_says_why() -> None:
    # a 70B model in bf16 (~140 GB) on one H200: its weights alone exceed half the GPU
    layout = plan_layout(sweep(), "sglang", gpu_total_mib=H200_MIB, weights_mib=140_000.0)
    assert layout.interleaved is False
    assert layout.share is None
    assert "leave too little of a half share" in layout.reason
    assert "one server at a time" in layout.reason
    # the same weights split over 8 GPUs by tensor parallelism fit twice
    split = plan_layout(sweep(tp_size=8), "sglang", gpu_total_mib=H200_MIB, weights_mib=140_000.0)
    assert split.interleaved is True


def test_interleave_false_and_the_cpu_engine() -> None:
    params = BenchmarkParams.model_validate(
        {**sweep().model_dump(exclude_none=True), "interleave": False, "depths": [5]}
    )
    layout = plan_layout(params, "sglang", gpu_total_mib=H200_MIB, weights_mib=270.0)
    assert (layout.interleaved, layout.reason) == (False, "interleave is false in the params")
    cpu = plan_layout(sweep(), "reference", gpu_total_mib=None, weights_mib=None)
    assert cpu.interleaved is True
    assert cpu.share is None, "the reference engine takes no memory fraction"
    unknown = plan_layout(sweep(), "sglang", gpu_total_mib=None, weights_mib=None)
    assert unknown.interleaved is True
    assert "unknown" in unknown.reason


def test_the_speculative_server_gets_the_same_absolute_share_as_the_baseline() -> None:
    # 140 GB free before the baseline took 0.4 of it (56 GB) plus ~4 GB of graphs and activations
    fraction = speculative_fraction(0.4, 140_000.0, 80_000.0)
    assert fraction * 80_000.0 == pytest.approx(0.4 * 140_000.0)
    assert fraction == pytest.approx(0.7)
    # no NVML readings: the baseline is assumed to hold its share plus a headroom of 0.05
    assert speculative_fraction(0.4, None, None) == pytest.approx(0.4 / 0.55)
    assert speculative_fraction(0.45, 100_000.0, 40_000.0) == MAX_FRACTION, "capped, never all of it"


def test_memory_back_names_the_gpus_still_holding_a_stopped_servers_memory() -> None:
    before = {0: (60_000.0, H200_MIB), 1: (60_000.0, H200_MIB)}
    assert memory_back(before, {0: (60_500.0, H200_MIB), 1: (60_000.0, H200_MIB)}, 1024.0) == []
    assert memory_back(before, {0: (90_000.0, H200_MIB), 1: (60_000.0, H200_MIB)}, 1024.0) == [
        "GPU 0 uses 90000 MiB, 60000 MiB before the server started"
    ]


def test_server_specs_of_the_baseline_and_of_a_tree() -> None:
    params = sweep(mem_fraction_static=0.8)
    assert params.launch is not None
    baseline = server_spec(params.launch, None, port=31000, mem_fraction=0.4)
    assert (baseline.draft, baseline.num_steps, baseline.port, baseline.mem_fraction_static) == (
        None,
        None,
        31000,
        0.4,
    )
    tree = server_spec(
        params.launch, SpecConfig(steps=5, topk=4, draft_tokens=8), port=31001, mem_fraction=None
    )
    assert (tree.draft, tree.num_steps, tree.eagle_topk, tree.num_draft_tokens) == ("/models/draft", 5, 4, 8)
    assert tree.mem_fraction_static == 0.8, "no split asked: the spec's own fraction"


def test_weights_mib_counts_weight_files_only(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 2**20)
    (tmp_path / "extra.bin").write_bytes(b"\0" * 2**19)
    (tmp_path / "config.json").write_text("{}")
    assert weights_mib(str(tmp_path)) == pytest.approx(1.5)
    assert weights_mib(str(tmp_path / "missing")) is None
    assert weights_mib(None) is None
