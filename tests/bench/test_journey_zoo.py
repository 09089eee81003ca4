"""bench.journey_zoo's pipeline (a planted zoo target on a GPU host with SGLang), as the API validates and
plans it, for either extract backend and for the CPU dry run on the reference engine."""

from __future__ import annotations

from pathlib import Path

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan
from bench.journey_zoo import parse, spec
from contract.params.extract import ExtractParams
from drafting.sglang_facts import SGLANG_VERSION_ON_GPU_HOST
from testsupport.target_zoo import VOCAB


def test_the_zoo_journey_plans_on_sglang_with_either_backend(tmp_path: Path) -> None:
    extra = "--attention-backend triton --sampling-backend pytorch"
    args = parse([str(tmp_path), str(tmp_path / "out"), "--zoo", "gemma3_text", "--backend", "sglang",
                  f"--sglang-args={extra}"])  # fmt: skip
    body = spec(tmp_path, args)
    plan = {s.step: s for s in eagle3_plan(Eagle3PipelineCreate(**body), str(tmp_path / "runs" / "p"))}
    assert list(plan) == ["generate", "extract", "train", "fix_keys", "gpu_check", "eval", "benchmark"]
    extract = ExtractParams(**plan["extract"].params)  # as the template queues it
    assert extract.backend == "sglang"
    assert extract.sglang_version == body["fix_keys"]["sglang_version"] == SGLANG_VERSION_ON_GPU_HOST
    assert extract.gpus_needed() == 1
    assert body["train"]["draft_vocab_size"] == VOCAB
    assert (
        body["generate"]["engine"]["extra_args"] == body["benchmark"]["launch"]["extra_args"] == extra.split()
    )
    assert body["benchmark"]["speedup_threshold"] == 0.0  # acceptance is the point, not speed
    assert body["eval"]["prompts"] == body["benchmark"]["prompts"]  # eval predicts what the sweep serves


def test_the_cpu_dry_run_uses_the_reference_engine_and_the_hf_backend(tmp_path: Path) -> None:
    args = parse([str(tmp_path), str(tmp_path / "out"), "--zoo", "qwen3_moe", "--device", "cpu",
                  "--engine", "reference"])  # fmt: skip
    body = spec(tmp_path, args)
    assert body["benchmark"]["launch"] == body["generate"]["engine"] == {"engine": "reference"}
    assert body["extract"] == {"backend": "hf", "device": "cpu", "max_len": 256, "batch_size": 32}
    assert "eval" in [s.step for s in eagle3_plan(Eagle3PipelineCreate(**body), str(tmp_path / "r"))]
