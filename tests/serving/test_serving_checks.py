"""Host-side launch checks on real folders, a real listening port and a real shared-memory folder."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from contract.params.launch import LaunchParams
from drafting.findings import Finding, Severity
from drafting.serving.launch.checks import prepare_launch
from drafting.serving.launch.host_checks import check_shm, stale_shm_segments
from drafting.serving.launch.render import HostFacts
from drafting.serving.launch.tensor_parallel import check_tp_size, tp_fits, valid_tp_sizes
from tests.conftest import free_port
from testsupport.tiny_pair import TinyPair, make_pair

GPU_HOST = HostFacts(python="/usr/bin/python3", sglang_version="0.5.14", gpu_count=1, on_host=True)


def prepared(params: LaunchParams, shm_dir: Path, gpus: tuple[int, ...] = (0,)) -> list[Finding]:
    return prepare_launch(params, host=GPU_HOST, gpus=gpus, shm_dir=shm_dir, use_sglang_parser=False).findings


def by_code(findings: list[Finding], code: str) -> Finding:
    matches = [f for f in findings if f.code == code]
    assert matches, f"{code} not in {[f.code for f in findings]}"
    return matches[0]


def launch(pair: TinyPair, **fields: object) -> LaunchParams:
    base: dict[str, object] = {
        "engine": "sglang",
        "model": str(pair.target),
        "draft": str(pair.draft),
        "depth": 3,
        "max_running_requests": 8,
        "port": free_port(),
    }
    return LaunchParams.model_validate({**base, **fields})


def rewrite_config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.fixture
def shm(tmp_path: Path) -> Path:
    folder = tmp_path / "shm"
    folder.mkdir()
    return folder


@pytest.fixture
def own_pair(tmp_path: Path) -> TinyPair:
    """A pair whose configs a test may edit (the session pair stays untouched)."""
    return make_pair(tmp_path / "pair")


def test_a_good_pair_passes_every_check(tiny_pair: TinyPair, shm: Path) -> None:
    findings = prepared(launch(tiny_pair), shm)
    assert [f for f in findings if f.severity is Severity.ERROR] == []
    assert "DOCTOR_CRASHED" not in {f.code for f in findings}


def test_missing_model_and_draft_folders(tmp_path: Path, shm: Path) -> None:
    params = LaunchParams(
        engine="sglang", model=str(tmp_path / "nope"), draft=str(tmp_path / "none"), depth=3
    )
    missing = [f for f in prepared(params, shm) if f.code == "PATH_MISSING"]
    assert len(missing) == 2


def test_eagle_algorithm_against_an_eagle3_draft_config(tiny_pair: TinyPair, shm: Path) -> None:
    finding = by_code(prepared(launch(tiny_pair, algorithm="EAGLE"), shm), "ALGORITHM_MISMATCH")
    assert finding.severity is Severity.ERROR


def test_the_draft_doctor_runs_for_the_host_sglang_version(tiny_pair: TinyPair, shm: Path) -> None:
    findings = prepared(launch(tiny_pair), shm)
    doctor = [f for f in findings if f.message.startswith("draft doctor:")]
    assert doctor, "the doctor's findings are part of the launch checks"


def test_the_draft_doctor_s_findings_keep_the_tensors_they_name(own_pair: TinyPair, shm: Path) -> None:
    weights = own_pair.draft / "model.safetensors"
    tensors = load_file(weights)
    tensors["optimizer.step"] = torch.zeros(1)  # a tensor SGLang's draft model never loads
    save_file(tensors, weights)
    ignored = by_code(prepared(launch(own_pair), shm), "TENSOR_IGNORED")
    assert ignored.message.startswith("draft doctor:")
    assert ignored.subjects == ("optimizer.step",)
    # a launch finding is stored with the doctor's keys, subjects included
    assert ignored.to_dict() == {
        "severity": str(ignored.severity),
        "code": "TENSOR_IGNORED",
        "message": ignored.message,
        "fix": ignored.fix,
        "subjects": ["optimizer.step"],
    }


def test_draft_context_shorter_than_the_target_needs_the_env_var(own_pair: TinyPair, shm: Path) -> None:
    rewrite_config(own_pair.draft, max_position_embeddings=256)
    refused = by_code(prepared(launch(own_pair), shm), "DRAFT_CONTEXT_SHORTER")
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in refused.fix
    allowed = prepared(launch(own_pair, env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}), shm)
    assert by_code(allowed, "DRAFT_CONTEXT_OVERRIDDEN").severity is Severity.INFO
    lowered = prepared(launch(own_pair, context_length=256), shm)
    assert "DRAFT_CONTEXT_SHORTER" not in {f.code for f in lowered}


def test_a_shallow_target_makes_sglangs_aux_layers_collide(tmp_path: Path, shm: Path) -> None:
    pair = make_pair(tmp_path / "pair", layers=8)
    rewrite_config(pair.target, num_hidden_layers=4)
    rewrite_config(pair.draft, eagle_config={})  # SGLang's default layers [2, n//2, n-3] = [2, 2, 1]
    finding = by_code(prepared(launch(pair), shm), "TARGET_AUX_LAYERS_COLLIDE")
    assert "[2, 2, 1]" in finding.message


def test_a_port_already_listening_is_found(tiny_pair: TinyPair, shm: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        finding = by_code(prepared(launch(tiny_pair, port=port), shm), "PORT_IN_USE")
    assert finding.severity is Severity.ERROR


def test_tp_size_beyond_the_jobs_gpus_and_a_host_without_sglang(tiny_pair: TinyPair, shm: Path) -> None:
    assert by_code(prepared(launch(tiny_pair, tp_size=2), shm), "TP_EXCEEDS_GPUS")
    no_sglang = HostFacts(python="/usr/bin/python3", sglang_version=None, gpu_count=1, on_host=True)
    rendered = prepare_launch(
        launch(tiny_pair), host=no_sglang, gpus=(0,), shm_dir=shm, use_sglang_parser=False
    )
    assert by_code(rendered.findings, "ENGINE_UNAVAILABLE").severity is Severity.ERROR


def test_stale_shared_memory_segments_are_reported_and_live_ones_are_not(shm: Path) -> None:
    for name in ("psm_0a1b2c3d", "sglang_loads_1.shm", "sem.loky-42-abc", f"sgl_shm_mq_{os.getpid()}_ab12"):
        (shm / name).write_bytes(b"x" * 1024)
    (shm / "sgl_shm_mq_999999999_cd34").write_bytes(b"x")  # its pid cannot exist
    (shm / "unrelated_segment").write_bytes(b"x")
    stale = stale_shm_segments(shm)
    assert stale == ["psm_0a1b2c3d", "sem.loky-42-abc", "sgl_shm_mq_999999999_cd34", "sglang_loads_1.shm"]
    assert by_code(check_shm(shm), "SHM_STALE_SEGMENTS").severity is Severity.WARNING


def test_too_little_free_shared_memory_is_an_error(shm: Path) -> None:
    free_mib = os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize / 2**20
    finding = by_code(check_shm(shm, min_free_mib=int(free_mib) + 1024), "SHM_LOW")
    assert finding.severity is Severity.ERROR
    assert check_shm(shm, min_free_mib=0) == []


def test_a_dry_run_is_judged_against_the_gpus_the_host_would_give(tiny_pair: TinyPair, shm: Path) -> None:
    no_lease = HostFacts(python="/usr/bin/python3", sglang_version="0.5.14", gpu_count=0, on_host=True)

    def dry(host_gpus: int, **fields: object) -> list[Finding]:
        params = launch(tiny_pair, dry_run=True, **fields)
        return prepare_launch(
            params, host=no_lease, gpus=(), shm_dir=shm, use_sglang_parser=False, host_gpu_count=host_gpus
        ).findings

    assert "TP_EXCEEDS_GPUS" not in {f.code for f in dry(1)}
    assert "TP_EXCEEDS_GPUS" not in {f.code for f in dry(2, tp_size=2)}
    assert "this host has 1 " in by_code(dry(1, tp_size=2), "TP_EXCEEDS_GPUS").message
    assert "use engine reference" in by_code(dry(0), "TP_EXCEEDS_GPUS").fix
    assert (
        by_code(dry(1, engine="auto"), "ENGINE_AUTO").severity is Severity.INFO
    )  # sglang, as a launch would
    assert by_code(dry(1, engine="auto", tp_size=2), "ENGINE_AUTO_REFERENCE")  # a launch would get no GPU
    real = launch(tiny_pair)  # not a dry run: the job's own lease counts, whatever the host has
    held = prepare_launch(
        real, host=no_lease, gpus=(), shm_dir=shm, use_sglang_parser=False, host_gpu_count=8
    )
    assert "the job holds 0" in by_code(held.findings, "TP_EXCEEDS_GPUS").message


def test_tp_size_must_split_the_attention_and_kv_heads_as_sglang_asserts(
    own_pair: TinyPair, shm: Path
) -> None:
    rewrite_config(own_pair.target, num_attention_heads=4, num_key_value_heads=4)
    finding = by_code(prepared(launch(own_pair, tp_size=3), shm, gpus=(0, 1, 2)), "TP_SIZE_HEADS_MISMATCH")
    assert finding.severity is Severity.ERROR
    assert "the target has 4 attention heads and 4 KV heads" in finding.message
    assert finding.fix.startswith("use tp_size 1, 2")
    assert "TP_SIZE_HEADS_MISMATCH" not in {
        f.code for f in prepared(launch(own_pair, tp_size=2), shm, (0, 1))
    }


@pytest.mark.parametrize(
    ("heads", "kv_heads", "tp_size", "fits"),
    [
        (4, 4, 3, False),  # attention heads % tp
        (32, 8, 16, True),  # more ranks than KV heads: 16 % 8 == 0, KV heads replicated
        (24, 4, 6, False),  # 4 KV heads < 6 ranks and 6 % 4 != 0
        (24, 8, 6, False),  # 8 KV heads >= 6 ranks and 8 % 6 != 0
        (24, 3, 6, True),  # 3 KV heads, each replicated on 2 of 6 ranks
        (8, 1, 8, True),  # multi-query attention
    ],
)
def test_sglangs_head_rule(heads: int, kv_heads: int, tp_size: int, fits: bool) -> None:
    assert tp_fits(tp_size, heads, kv_heads) is fits
    config = {"num_attention_heads": heads, "num_key_value_heads": kv_heads}
    assert (check_tp_size(tp_size, config, None) == []) is fits
    assert tp_size in valid_tp_sizes((heads, kv_heads)) or not fits


def test_the_draft_is_held_to_the_rule_and_kv_heads_default_to_the_attention_heads() -> None:
    target = {"text_config": {"num_attention_heads": 8, "num_key_value_heads": 8}}
    draft = {"num_attention_heads": 6}  # no num_key_value_heads: 6 KV heads, as transformers reads it
    (finding,) = check_tp_size(4, target, draft)
    assert "the draft has 6 attention heads and 6 KV heads" in finding.message
    assert "target" not in finding.message.split(".")[0]
    assert finding.fix == "use tp_size 1 or 2"
    assert check_tp_size(4, {}, None) == []  # a config without heads says nothing


def test_a_port_whose_grpc_port_passes_65535_is_refused_on_0_5_14(tiny_pair: TinyPair, shm: Path) -> None:
    # Seen on the H200: --port 58129 → "SGLANG_GRPC_PORT (68129) must be between 1 and 65535" at start-up.
    finding = by_code(prepared(launch(tiny_pair, port=58129), shm), "PORT_TOO_HIGH")
    assert finding.severity is Severity.ERROR
    assert "68129" in finding.message
    assert "55535" in finding.fix
    codes = [f.code for f in prepared(launch(tiny_pair, port=55535), shm)]
    assert "PORT_TOO_HIGH" not in codes
    with_env = launch(tiny_pair, port=58129, env={"SGLANG_GRPC_PORT": "40000"})
    assert "PORT_TOO_HIGH" not in [f.code for f in prepared(with_env, shm)]
    newer = HostFacts(python="/usr/bin/python3", sglang_version="0.5.23", gpu_count=1, on_host=True)
    rendered = prepare_launch(
        launch(tiny_pair, port=58129), host=newer, gpus=(0,), shm_dir=shm, use_sglang_parser=False
    )
    assert "PORT_TOO_HIGH" not in [f.code for f in rendered.findings]


def test_the_free_port_is_one_sglang_0_5_14_accepts() -> None:
    ports = {free_port() for _ in range(50)}
    assert all(20000 <= port <= 55535 for port in ports)
    assert len(ports) > 1
