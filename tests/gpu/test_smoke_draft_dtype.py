"""The load smoke test on real SGLang catches a converted draft that SGLang kills: a speculators bf16 draft
through eyas's converter serves as well as the same tensors in SGLang's native layout, and the same
converted folder with its config's dtype removed (as the converter once wrote it: SGLang then builds the
draft in float16 against a bf16 target) makes the server die, which the smoke test says.

Needs SGLang and speculators in the environment (skipped without them). SGLang runs with CUDA graphs on,
triton attention, pytorch sampling and no grammar backend (what an SGLang without flashinfer serves with).
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from drafting.checkpoint import fix_checkpoint
from drafting.serving.evaluation.smoke import SmokeReport
from drafting.serving.evaluation.smoke_local import SmokeRequest, run_local_smoke
from tests.gpu.draft_dtype_inputs import build

SGLANG_ARGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none"]
READY_S = 240.0


def smoke(draft: Path, target: Path, **kwargs: Any) -> SmokeReport:
    request = SmokeRequest(
        draft=draft, target=target, engine="sglang", depth=3, requests=4, max_new_tokens=64,
        extra_args=SGLANG_ARGS, mem_fraction_static=0.5, ready_timeout_s=READY_S,
        enforce_checks=False,  # start even what the doctor refuses: this is about serving
    )  # fmt: skip
    return run_local_smoke(request, **kwargs)


def without_dtype(fixed: Path, dest: Path) -> list[str]:
    shutil.copytree(fixed, dest)
    config = json.loads((dest / "config.json").read_text())
    removed = [key for key in ("torch_dtype", "dtype") if config.pop(key, None) is not None]
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return removed


@pytest.mark.timeout(1200)
def test_a_converted_speculators_draft_serves_and_one_without_its_dtype_is_caught(tmp_path: Path) -> None:
    pytest.importorskip("sglang", reason="SGLang serves the drafts")
    pytest.importorskip("speculators", reason="speculators' classes write the draft to convert")
    inputs = tmp_path / "inputs"
    built = build(inputs)
    assert built["offline_accept_length_depth3"] > 2  # the fitted draft is worth serving
    target = inputs / "target"
    release = importlib.metadata.version("sglang")
    fixed = fix_checkpoint(
        inputs / "draft_speculators", tmp_path / "fixed", target=target, sglang_version=release
    )
    assert fixed.ok, fixed
    assert without_dtype(tmp_path / "fixed", tmp_path / "unfixed")  # the converter writes the dtype

    unfixed = smoke(tmp_path / "unfixed", target, compare=False)
    assert unfixed.verdict in ("server_died", "not_ready"), unfixed.as_dict()
    converted = smoke(tmp_path / "fixed", target)
    assert converted.ok, converted.as_dict()
    native = smoke(inputs / "draft_native", target, baseline=converted.baseline)
    assert native.ok, native.as_dict()
    assert converted.accept_length == pytest.approx(native.accept_length, rel=0.02)
