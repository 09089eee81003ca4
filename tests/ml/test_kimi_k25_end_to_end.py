"""The reference deployment end to end on a Kimi-K2.5-shaped target (testsupport/target_zoo.py `kimi_k25`: a
DeepSeek-V3 text model with MLA, MoE and yarn rope under `text_config`, context 262,144, weights under
`language_model.*`, an auto_map naming code the folder lacks), on the CPU with the real stages:

generate (the reference engine answering as the target) -> extract -> train -> fix_keys -> the doctor ->
the reference engine serving target and draft -> the launch that deployment ran (SGLang, tensor parallel 8,
depth 16, EAGLE3, its NCCL environment), rendered and checked on a host with 8 GPUs and accepted by SGLang's
own parser. The GPUs are the one thing that cannot exist here: the launch is checked against the facts of a
host that has them (HostFacts), and nothing starts. Figures from these toy models are plumbing checks.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from contract.params.checkpoint import FixKeysParams
from contract.params.extract import ExtractParams
from contract.params.launch import LaunchParams
from drafting.checkpoint import diagnose
from drafting.context import StageContext
from drafting.findings import Severity
from drafting.ml.target_head import load_target_head
from drafting.serving.launch.checks import prepare_launch
from drafting.serving.launch.render import HostFacts
from drafting.serving.launch.sglang_parser import parse_with_sglang, sglang_parser
from drafting.stages import extract, fix_keys, generate, train
from drafting.stages import launch as launch_stage
from tests.conftest import free_port
from tests.generation.conftest import generate_params, output_records, write_prompts
from tests.serving.conftest import RecordingContext, start_stage
from testsupport.target_zoo import KIMI_MAX_POSITIONS, kimi_k25
from testsupport.tiny_targets import cpu_train_params

DEPTH = 16
NCCL_ENV = {"NCCL_DEBUG": "WARN", "NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"}


def _generate_extract_train(root: Path, target: Path) -> Path:
    ctx = StageContext(work_dir=root)
    prompts = write_prompts(
        root / "prompts.jsonl",
        [{"messages": [{"role": "user", "content": f"w{i} w{i + 3} w{i + 7}"}]} for i in range(6)],
    )
    conversations = root / "conversations.jsonl"
    params = generate_params(
        target, conversations, prompts=str(prompts), max_new_tokens=12, temperature=1.0, concurrency=2
    )
    generated = generate.run(ctx, params)
    assert generated["records"]["written"] >= 4, generated
    assert all(r["messages"][-1]["role"] == "assistant" for r in output_records(conversations))
    extracted = extract.run(
        ctx,
        ExtractParams(
            target=str(target), data=str(conversations), output=str(root / "hs"), device="cpu",
            dtype="float32", max_len=64,
        ),
    )  # fmt: skip
    assert extracted["samples"] >= 4
    trained = train.run(
        ctx,
        cpu_train_params(
            target, root / "hs", root / "train", epochs=2, batch_size=1, ttt_steps=2, draft_vocab_size=48,
            val_fraction=0.0, max_len=64, warmup_steps=0, init_lm_head="target",
        ),
    )  # fmt: skip
    draft = root / "sglang_draft"
    fix_keys.run(ctx, FixKeysParams(source=trained["checkpoint"], dest=str(draft), target_config=str(target)))
    return draft


def _serve_one_request(root: Path, target: Path, draft: Path) -> dict[str, object]:
    """The reference engine serving the Kimi-shaped target and its draft: one greedy request."""
    ctx = RecordingContext(work_dir=root)
    spec = LaunchParams(
        engine="reference", model=str(target), draft=str(draft), depth=3, max_running_requests=2,
        port=free_port(), ready_timeout_s=120, stop_grace_s=5, env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    stage = start_stage(launch_stage.run, ctx, spec)
    try:
        stage.wait_for(lambda: "ready" in ctx.server_states(), timeout_s=120)
        url = str(ctx.recording.of_type("server")[0]["url"])
        sampling = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}
        body = {"input_ids": [2, 4, 9, 12, 3, 5], "sampling_params": sampling}
        response = httpx.post(f"{url}/generate", json=body, timeout=120)
        assert response.status_code == 200, response.text
        meta: dict[str, object] = response.json()["meta_info"]
    finally:
        stage.stop()
    assert ctx.server_states()[-1] == "stopped"
    return meta


@pytest.mark.timeout(900)
def test_the_reference_deployment_on_a_kimi_k25_shaped_target(tmp_path: Path) -> None:
    target = kimi_k25(tmp_path / "kimi")
    draft = _generate_extract_train(tmp_path, target)

    config = json.loads((draft / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert (config["hidden_size"], config["vocab_size"]) == (32, 64)
    assert config["max_position_embeddings"] == KIMI_MAX_POSITIONS  # the target's context, not a default
    assert config["rope_parameters"]["rope_type"] == "yarn"  # the target's rope, at its positions
    head = load_target_head(target)  # the draft's head started as the target's rows of its draft vocab
    assert tuple(head.lm_head.shape) == (64, 32)

    report = diagnose(draft, target=target)
    errors = [f for f in report.findings if f.severity == Severity.ERROR]
    assert errors == [], errors

    meta = _serve_one_request(tmp_path, target, draft)
    assert meta["completion_tokens"] == 12
    assert int(str(meta["spec_verify_ct"])) >= 1

    seed = LaunchParams(
        engine="sglang", model=str(target), draft=str(draft), depth=DEPTH, tp_size=8, trust_remote_code=True,
        max_running_requests=8, env=NCCL_ENV, dry_run=True,
    )  # fmt: skip
    gpu_host = HostFacts(python="/usr/bin/python3", sglang_version="0.5.14", gpu_count=8, on_host=True)
    shm = tmp_path / "shm"
    shm.mkdir()
    rendered = prepare_launch(seed, host=gpu_host, gpus=list(range(8)), shm_dir=shm)
    assert rendered.errors == [], rendered.errors
    argv = rendered.argv
    assert argv[argv.index("--tp-size") + 1] == "8"
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert argv[argv.index("--speculative-num-steps") + 1] == str(DEPTH)
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == str(DEPTH + 1)
    assert "--trust-remote-code" in argv
    assert all(rendered.env[name] == value for name, value in NCCL_ENV.items())
    parser = sglang_parser()
    assert parser is not None, "sglang is installed in the venv (--no-deps) for its parser"
    parsed = parse_with_sglang(parser, argv[3:])
    assert parsed.unknown == []
    assert parsed.error is None
