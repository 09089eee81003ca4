"""The load smoke test end to end on the CPU: eyas's reference engine in real processes, real drafts.

The target is the constructed successor Llama (cli.demo.constructed), declared bf16 like a real target (the
reference engine computes in float32); the trained draft is fitted to it for a few hundred steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import torch

from cli.demo.constructed import successor_target
from contract.params.benchmark import BenchmarkParams
from contract.reasons import TerminationReason
from drafting.context import StageError
from drafting.ml.drafter import Eagle3Drafter, default_aux_layers, save_drafter
from drafting.serving.engine.decoding import DecodeLimits, greedy_decode
from drafting.serving.evaluation.smoke import smoke_prompts
from drafting.serving.evaluation.smoke_local import SmokeRequest, run_local_smoke
from drafting.stages import benchmark as benchmark_stage
from tests.conftest import free_port
from tests.serving.conftest import RecordingContext
from testsupport.tiny_pair import fit_drafter

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SuccessorDrafts:
    target: Path
    trained: Path
    unloaded: Path
    no_dtype: Path


def make_successor_drafts(root: Path, *, fit_steps: int = 150) -> SuccessorDrafts:
    """A bf16 successor target, a draft fitted to it, one whose weights are empty (zeros, as the memory of
    tensors SGLang's loader dropped by name) and the fitted one without torch_dtype."""
    target_dir = successor_target(root / "target", dtype=torch.bfloat16)
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    config = json.loads((target_dir / "config.json").read_text())
    vocab, layers = int(config["vocab_size"]), int(config["num_hidden_layers"])

    def drafter() -> Eagle3Drafter:
        torch.manual_seed(3)
        made = Eagle3Drafter.from_target_config(
            config, draft_vocab_size=vocab, aux_layer_ids=default_aux_layers(layers)
        )
        made.set_target_embeddings(target.get_input_embeddings().weight.detach())
        return made

    unloaded = drafter()
    with torch.no_grad():  # what a draft whose tensor names the loader dropped keeps: nothing it learned
        for name, param in unloaded.named_parameters():
            if not name.startswith("embed_tokens"):
                param.zero_()
    save_drafter(unloaded, root / "unloaded", target_config=config)
    prompts = smoke_prompts(target_dir, 8)
    generator = torch.Generator().manual_seed(5)
    prompts += [torch.randint(0, vocab, (10,), generator=generator).tolist() for _ in range(8)]
    sequences = [p + greedy_decode(target, p, DecodeLimits(40)).output_ids for p in prompts]
    trained = drafter()
    fit_drafter(target, trained, sequences, steps=fit_steps)
    save_drafter(trained, root / "trained", target_config=config)
    save_drafter(trained, root / "no_dtype", target_config=config)
    draft_config = json.loads((root / "no_dtype" / "config.json").read_text())
    for key in ("torch_dtype", "dtype"):  # the converter bug of issue 12: SGLang then builds it in float16
        draft_config.pop(key, None)
    (root / "no_dtype" / "config.json").write_text(json.dumps(draft_config))
    return SuccessorDrafts(target_dir, root / "trained", root / "unloaded", root / "no_dtype")


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> SuccessorDrafts:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return make_successor_drafts(tmp_path_factory.mktemp("smoke"))
    finally:
        torch.set_num_threads(before)


def request(draft: Path, target: Path, **fields: object) -> SmokeRequest:
    base: dict[str, object] = {
        "draft": draft,
        "target": target,
        "engine": "reference",
        "port": free_port(),
        "requests": 3,
        "max_new_tokens": 24,
        "ready_timeout_s": 120,
        "echo_log": False,
        "env": {"OMP_NUM_THREADS": "1"},
    }
    return SmokeRequest(**{**base, **fields})  # type: ignore[arg-type]


def test_cli_doctor_serve_passes_a_trained_draft_with_json_and_exit_0(drafts: SuccessorDrafts) -> None:
    argv = [sys.executable, "-m", "cli.main", "doctor", str(drafts.trained), "--target", str(drafts.target)]
    argv += ["--serve", "--engine", "reference", "--json", "--requests", "3", "--max-new-tokens", "24"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    smoke = report["smoke"]
    assert report["ok"] is True
    assert smoke["verdict"] == "passed"
    assert smoke["engine"] == "reference"
    assert smoke["accept_length"] > 2.0, "a draft fitted to the successor target accepts most drafts"
    assert smoke["real_losses"] == 0
    assert smoke["requests"] == 3


def test_a_draft_whose_weights_did_not_load_is_caught_as_acceptance_about_one(
    drafts: SuccessorDrafts,
) -> None:
    report = run_local_smoke(request(drafts.unloaded, drafts.target))
    assert report.verdict == "acceptance_too_low", report.as_dict()
    assert report.accept_length is not None
    assert 1.0 <= report.accept_length < 1.05
    assert "draft weights probably not loaded" in report.message
    assert report.as_dict()["termination_reason"] == "CHECKPOINT_INVALID"


def test_a_draft_config_that_kills_the_engine_is_caught_with_its_log_lines(drafts: SuccessorDrafts) -> None:
    """No torch_dtype: SGLang 0.5.14 builds the draft in float16 and its scheduler dies at the first request
    (the reference engine follows the same rule). The launch checks are not enforced, so the server starts."""
    report = run_local_smoke(request(drafts.no_dtype, drafts.target, enforce_checks=False))
    assert report.verdict == "server_died", report.as_dict()
    text = "\n".join(report.log_lines)
    assert "Scheduler hit an exception" in text
    assert "expected mat1 and mat2 to have the same dtype, but got: c10::BFloat16 != c10::Half" in text
    assert report.details["exit_code"] == 1
    assert report.as_dict()["termination_reason"] == "SERVER_DIED"


def test_the_sweep_fails_before_measuring_a_draft_at_acceptance_one(
    ctx: RecordingContext, drafts: SuccessorDrafts
) -> None:
    params = BenchmarkParams(
        mode="sweep",
        launch={
            "engine": "reference",
            "model": str(drafts.target),
            "draft": str(drafts.unloaded),
            "max_running_requests": 4,
            "port": free_port(),
            "ready_timeout_s": 120,
            "env": {"OMP_NUM_THREADS": "1"},
        },
        depths=[3],
        max_prompts=2,
        max_new_tokens=8,
        warmup_requests=0,
    )
    with pytest.raises(StageError) as caught:
        benchmark_stage.run(ctx, params)
    failure = caught.value
    assert failure.reason is TerminationReason.CHECKPOINT_INVALID
    assert "smoke test" in failure.message
    assert "draft weights probably not loaded" in failure.message
    assert ctx.recording.of_type("benchmark_round") == [], "no round ran: depth 3 failed before measuring"
    assert ctx.recording.of_type("benchmark_row") == []
    [smoke] = ctx.recording.of_type("smoke")
    assert smoke["depth"] == 3
    assert smoke["config"] == "3,1,4"
    assert smoke["verdict"] == "acceptance_too_low"
    servers = ctx.recording.of_type("server")
    assert [e["state"] for e in servers].count("stopped") == 2
    assert not any(psutil.pid_exists(e["pid"]) for e in servers)
