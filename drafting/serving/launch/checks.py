"""Host-side launch checks, and `prepare_launch`: read the configs, render, check, before anything starts."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from contract.params.launch import LaunchParams, extra_arg_paths
from drafting import sglang_facts as rules
from drafting.findings import Finding, error, info, warning
from drafting.serving.launch.doctor_bridge import run_draft_doctor
from drafting.serving.launch.host_checks import (
    check_file_exists,
    check_grpc_port,
    check_model_folder,
    check_port_free,
    check_shm,
)
from drafting.serving.launch.model_configs import (
    captured_aux_layers,
    derived_context_length,
    env_flag_set,
    read_config,
    target_layer_count,
)
from drafting.serving.launch.render import HostFacts, RenderedLaunch, render_launch
from drafting.serving.launch.tensor_parallel import check_tp_size
from drafting.support_matrix import CAPTURE_METHOD, support_for

# Findings about the target's class that the draft doctor also reports: said once.
TARGET_CLASS_CODES = frozenset({"TARGET_EAGLE3_UNSUPPORTED"})

SHM_DIR = Path("/dev/shm")


def prepare_launch(
    params: LaunchParams,
    *,
    host: HostFacts,
    gpus: Sequence[int] = (),
    shm_dir: Path = SHM_DIR,
    use_sglang_parser: bool = True,
    host_gpu_count: int | None = None,
) -> RenderedLaunch:
    """Render with the draft's real config and add every host check; errors mean: do not start.

    A dry run submitted through the API holds no GPU lease, so it is judged against the GPUs a real launch of
    the spec would hold on this host (`host_gpu_count`, read through NVML when not given), not the none it
    holds itself; a dry run that does hold GPUs (a job given `gpus`) is judged against those.
    """
    if params.dry_run and not gpus:
        count = host_gpu_count if host_gpu_count is not None else host_inventory_count()
        gpus = gpus_a_launch_would_hold(params, count)
        host = replace(host, gpu_count=len(gpus))
    draft_config = read_config(params.draft) if params.draft else None
    rendered = render_launch(
        params, host=host, draft_config=draft_config, use_sglang_parser=use_sglang_parser
    )
    rendered.findings += check_launch(params, rendered, host=host, gpus=gpus, shm_dir=shm_dir)
    return rendered


def host_inventory_count() -> int:
    """How many GPUs NVML sees on this machine (0 without a driver)."""
    from drafting.hostinfo.gpus import inventory

    return len(inventory().gpus)


def gpus_a_launch_would_hold(params: LaunchParams, host_gpu_count: int) -> tuple[int, ...]:
    """The GPU indices a real launch of `params` would lease on a host with `host_gpu_count` GPUs.

    As at submit: sglang asks for tp_size (capped here at what the host has, so the tp check can say so);
    auto asks for tp_size only when the host has that many, else none (the reference engine); reference none.
    """
    wanted = params.gpus_needed()
    if params.engine == "auto" and host_gpu_count < wanted:
        wanted = 0
    return tuple(range(min(wanted, host_gpu_count)))


def check_launch(
    params: LaunchParams,
    rendered: RenderedLaunch,
    *,
    host: HostFacts,
    gpus: Sequence[int] = (),
    shm_dir: Path = SHM_DIR,
) -> list[Finding]:
    findings = _path_findings(params)
    findings += _engine_findings(params, rendered.engine, host, gpus)
    target_config = read_config(params.model)
    draft_config = read_config(params.draft) if params.draft else None
    version = host.sglang_version or rules.SGLANG_VERSION_ON_GPU_HOST
    if rendered.engine == "sglang":
        findings += check_tp_size(params.tp_size, target_config, draft_config)
    if rendered.algorithm == "EAGLE3" and rendered.shape is not None and target_config is not None:
        findings += target_class_findings(target_config, version, rendered.engine)
    if rendered.shape is not None and target_config is not None and draft_config is not None:
        findings += _draft_against_target(params, rendered, target_config, draft_config, version)
        assert params.draft is not None
        said = {f.code for f in findings}
        doctor = run_draft_doctor(
            params.draft, target=params.model, algorithm=rendered.algorithm, sglang_version=version
        )
        findings += [f for f in doctor if f.code not in said or f.code not in TARGET_CLASS_CODES]
    port_findings = [check_port_free(params.host, params.port)]
    if rendered.engine == "sglang":
        version = host.sglang_version or rules.SGLANG_VERSION_ON_GPU_HOST
        port_findings.append(check_grpc_port(params.port, version, params.env))
    findings += [f for f in port_findings if f is not None]
    findings += check_shm(shm_dir)
    return findings


def _path_findings(params: LaunchParams) -> list[Finding]:
    found = [check_model_folder("model", params.model)]
    if params.draft is not None:
        found.append(check_model_folder("draft", params.draft))
    found += [check_file_exists(flag, value) for flag, value in extra_arg_paths(params.extra_args)]
    return [f for f in found if f is not None]


def _engine_findings(
    params: LaunchParams, engine: str, host: HostFacts, gpus: Sequence[int]
) -> list[Finding]:
    if engine != "sglang":
        return []
    findings: list[Finding] = []
    if host.sglang_version is None:
        message = "engine sglang, but sglang is not installed for this worker's python"
        findings.append(error("ENGINE_UNAVAILABLE", message, "install sglang there, or use engine reference"))
    if params.tp_size > len(gpus):
        needs = f"tp_size {params.tp_size} needs {params.tp_size} GPU(s)"
        if params.dry_run:
            message = f"{needs}; this host has {len(gpus)} (a dry run is judged against the host's GPUs)"
            fix = f"use tp_size ≤ {len(gpus)}, or " if gpus else "use engine reference, or "
            fix += f"a host with {params.tp_size} GPU(s)"
        else:
            message, fix = f"{needs}; the job holds {len(gpus)}", "request as many GPUs as tp_size"
        findings.append(error("TP_EXCEEDS_GPUS", message, fix))
    return findings


def target_class_findings(target_config: dict[str, Any], version: str, engine: str) -> list[Finding]:
    """Whether SGLang `version` serves EAGLE-3 for the target's class (the support matrix)."""
    support = support_for(target_config, version)
    refusal = support.refusal() if support is not None else None
    if refusal is None:
        return []
    if engine != "sglang":
        message = f"{refusal}; eyas's reference engine serves it here, a deployment on SGLang cannot"
        return [warning("TARGET_EAGLE3_UNSUPPORTED", message)]
    fix = f"serve with a release whose class defines {CAPTURE_METHOD}, or draft for another target"
    return [error("TARGET_EAGLE3_UNSUPPORTED", refusal, fix)]


def _draft_against_target(
    params: LaunchParams,
    rendered: RenderedLaunch,
    target_config: dict[str, Any],
    draft_config: dict[str, Any],
    version: str,
) -> list[Finding]:
    findings = _context_findings(params, target_config, draft_config)
    if rendered.algorithm == "EAGLE3":
        collision = _aux_layer_finding(target_config, draft_config, version)
        findings += [collision] if collision else []
    return findings


def _context_findings(
    params: LaunchParams, target_config: dict[str, Any], draft_config: dict[str, Any]
) -> list[Finding]:
    target_context = params.context_length or derived_context_length(target_config)
    draft_context = derived_context_length(draft_config)
    if target_context <= draft_context:
        return []
    what = f"the target's context {target_context} is longer than the draft's {draft_context}"
    if env_flag_set(params.env, rules.CONTEXT_OVERRIDE_ENV):
        return [
            info("DRAFT_CONTEXT_OVERRIDDEN", f"{what}; {rules.CONTEXT_OVERRIDE_ENV}=1 lets SGLang extend it")
        ]
    message = f"{what}: SGLang refuses to start (ValueError) unless {rules.CONTEXT_OVERRIDE_ENV}=1"
    fix = (
        f"set env {rules.CONTEXT_OVERRIDE_ENV}=1, lower context_length to {draft_context}, "
        "or raise the draft's max_position_embeddings"
    )
    return [error("DRAFT_CONTEXT_SHORTER", message, fix)]


def _aux_layer_finding(
    target_config: dict[str, Any], draft_config: dict[str, Any], version: str
) -> Finding | None:
    layers = target_layer_count(target_config)
    captured = captured_aux_layers(target_config, draft_config, version)
    if layers is None or captured is None:
        return None
    increasing = all(a < b for a, b in itertools.pairwise(captured))
    if increasing and all(0 <= i < layers for i in captured):
        return None
    message = (
        f"SGLang would capture target layers {captured} of {layers} "
        f"(default [{rules.DEFAULT_AUX_LAYERS}]): they collide or fall outside the model, so the draft's fc "
        "gets the wrong width and the first forward crashes (seen on the GPU host with 4 layers)"
    )
    fix = "use a target with ≥ 7 layers, or set eagle_config.eagle_aux_hidden_state_layer_ids in the draft"
    return error("TARGET_AUX_LAYERS_COLLIDE", message, fix)
