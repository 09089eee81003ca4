"""Render a launch spec into the exact argv and environment, with the findings of every pure check.

Pure: no files read, nothing started. Given the draft's config.json (the stage reads it on the host) the
algorithm is checked against it; without it (the API rendering a spec) EAGLE3 is assumed and said so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract.params.launch import CUDA_GRAPH_OFF_FLAG, LaunchParams
from drafting import sglang_facts as rules
from drafting.findings import Finding, error, errors_in, info, warning
from drafting.serving.launch.flag_checks import check_extra_args, check_with_sglang_parser
from drafting.serving.launch.sglang_parser import sglang_parser
from drafting.serving.launch.spec_shape import SpecShape, resolve_spec_shape

REFERENCE_MODULE = "drafting.serving.engine.reference_engine"


@dataclass(frozen=True)
class HostFacts:
    """What rendering needs to know about the host that will run the server."""

    python: str = "python3"
    sglang_version: str | None = None  # None: sglang is not installed there
    gpu_count: int = 0
    on_host: bool = False  # False when rendered away from the host (the API): engine "auto" is then a guess


@dataclass
class RenderedLaunch:
    engine: str
    argv: list[str]
    env: dict[str, str]
    url: str
    algorithm: str | None
    shape: SpecShape | None
    findings: list[Finding] = field(default_factory=list)
    cuda_graphs: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return errors_in(self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "argv": self.argv,
            "env": self.env,
            "url": self.url,
            "algorithm": self.algorithm,
            "ok": not self.errors,
            "findings": [f.to_dict() for f in self.findings],
            "cuda_graphs": self.cuda_graphs,
        }


def render_launch(
    params: LaunchParams,
    *,
    host: HostFacts | None = None,
    draft_config: dict[str, Any] | None = None,
    use_sglang_parser: bool = True,
) -> RenderedLaunch:
    host = host or HostFacts()
    engine, findings = resolve_engine(params.engine, host)
    shape, shape_findings = resolve_spec_shape(params)
    algorithm, algorithm_findings = resolve_algorithm(params, draft_config)
    findings += shape_findings + algorithm_findings
    parser = sglang_parser() if use_sglang_parser and engine == "sglang" else None
    findings += check_extra_args(params.extra_args, parser)
    findings += _serving_rule_findings(params, engine, shape)
    if engine == "sglang":
        server_args = _sglang_server_args(params, algorithm, shape)
        argv = [host.python, "-m", rules.LAUNCH_MODULE, *server_args]
        findings += check_with_sglang_parser(server_args, parser)
    else:
        argv = [host.python, "-m", REFERENCE_MODULE, *_reference_args(params, shape)]
    env = {**params.env, "PYTHONUNBUFFERED": "1"}
    graphs, graph_findings = cuda_graph_state(params, engine)
    return RenderedLaunch(
        engine,
        argv,
        env,
        server_url(params),
        algorithm if shape else None,
        shape,
        findings + graph_findings,
        graphs,
    )


def cuda_graph_state(params: LaunchParams, engine: str) -> tuple[dict[str, Any], list[Finding]]:
    """Whether the server runs CUDA graphs, and why not: results carry it next to every speed they report."""
    if engine != "sglang":
        state = {
            "enabled": None,
            "off_reason": "the reference engine runs in torch on the CPU: no CUDA graphs",
        }
        return state, []
    if params.cuda_graphs:
        return {"enabled": True, "off_reason": None}, []
    message = (
        f"CUDA graphs are off ({params.cuda_graphs_off_reason}): a small target's decoding is then bound by "
        "kernel launches, so speeds measured this way say little about a deployment"
    )
    finding = warning("CUDA_GRAPHS_OFF", message, "set cuda_graphs true unless graph capture itself fails")
    return {"enabled": False, "off_reason": params.cuda_graphs_off_reason}, [finding]


def server_url(params: LaunchParams) -> str:
    """Where eyas reaches the server: a wildcard bind is reached on loopback."""
    host = "127.0.0.1" if params.host in ("0.0.0.0", "::", "") else params.host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{params.port}"


def resolve_engine(requested: str, host: HostFacts) -> tuple[str, list[Finding]]:
    if requested != "auto":
        return requested, []
    if not host.on_host:
        message = (
            "engine auto resolves on the host (sglang when installed with a GPU); rendered as sglang here"
        )
        return "sglang", [info("ENGINE_AUTO_ASSUMED", message)]
    if host.sglang_version is not None and host.gpu_count > 0:
        return "sglang", [info("ENGINE_AUTO", f"sglang {host.sglang_version} with {host.gpu_count} GPU(s)")]
    why = "sglang is not installed" if host.sglang_version is None else "the job holds no GPU"
    message = f"engine auto chose eyas's reference engine ({why}); it is not SGLang and runs on the CPU"
    return "reference", [warning("ENGINE_AUTO_REFERENCE", message)]


def resolve_algorithm(
    params: LaunchParams, draft_config: dict[str, Any] | None
) -> tuple[str | None, list[Finding]]:
    if params.draft is None:
        return None, []
    if draft_config is None:
        chosen = params.algorithm or "EAGLE3"
        message = f"algorithm {chosen} {'given' if params.algorithm else 'assumed'}; checked on the host"
        return chosen, [info("ALGORITHM_UNCHECKED", message)]
    architectures = [str(a) for a in draft_config.get("architectures") or []]
    inferred = next(
        (rules.DRAFT_ARCHITECTURES[a] for a in architectures if a in rules.DRAFT_ARCHITECTURES), None
    )
    if inferred is None:
        return params.algorithm, [_unservable_architecture(architectures)]
    if params.algorithm is not None and params.algorithm != inferred:
        return params.algorithm, [_algorithm_mismatch(params.algorithm, inferred, architectures)]
    return inferred, []


def _unservable_architecture(architectures: list[str]) -> Finding:
    if any(a in rules.UNCONVERTED_ARCHITECTURES for a in architectures):
        message = f"the draft's architectures {architectures} are a training library's layout, not SGLang's"
        return error(
            "DRAFT_NOT_CONVERTED", message, "convert it with a fix_keys job, then launch the new folder"
        )
    known = ", ".join(sorted(rules.DRAFT_ARCHITECTURES))
    message = f"the draft's config.json architectures {architectures} name no SGLang draft class ({known})"
    return error("DRAFT_ARCHITECTURE_UNKNOWN", message, "run the doctor job on the draft folder")


def _algorithm_mismatch(given: str, inferred: str, architectures: list[str]) -> Finding:
    message = (
        f"algorithm {given} does not match the draft ({architectures} needs {inferred}). Served as EAGLE, an "
        "EAGLE-3 draft loses its fc and lm_head silently and accepts ~1.0 tokens per step"
    )
    return error("ALGORITHM_MISMATCH", message, f"set algorithm {inferred}, or leave it unset to infer it")


def _serving_rule_findings(params: LaunchParams, engine: str, shape: SpecShape | None) -> list[Finding]:
    findings: list[Finding] = []
    if shape is not None and params.max_running_requests is None:
        message = (
            f"max_running_requests is unset: under speculative decoding SGLang silently caps it at "
            f"{rules.AUTO_MAX_RUNNING_REQUESTS}"
        )
        findings.append(
            warning("MAX_RUNNING_REQUESTS_DEFAULT", message, "set max_running_requests explicitly")
        )
    if params.log_level in rules.QUIET_LOG_LEVELS:
        message = f"log_level {params.log_level} hides the `accept len:` lines and the ready line (INFO)"
        findings.append(warning("LOG_LEVEL_HIDES_ACCEPTANCE", message, "use log_level info"))
    if engine == "reference":
        findings += _reference_limits(params, shape)
    return findings


def _reference_limits(params: LaunchParams, shape: SpecShape | None) -> list[Finding]:
    findings: list[Finding] = []
    if shape is not None and not shape.is_chain:
        message = f"the reference engine drafts chains only (eagle_topk 1), not topk {shape.eagle_topk}"
        findings.append(error("REFERENCE_TREE_UNSUPPORTED", message, "use depth k, or engine sglang"))
    if params.extra_args:
        message = "extra_args are SGLang flags; the reference engine ignores them"
        findings.append(info("EXTRA_ARGS_IGNORED", message))
    if params.tp_size > 1:
        findings.append(info("TP_IGNORED", "the reference engine runs on one device; tp_size is ignored"))
    return findings


def _sglang_server_args(params: LaunchParams, algorithm: str | None, shape: SpecShape | None) -> list[str]:
    args = ["--model-path", params.model, "--host", params.host, "--port", str(params.port)]
    args += ["--tp-size", str(params.tp_size), "--log-level", params.log_level]
    if params.draft is not None and shape is not None and algorithm is not None:
        args += ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", params.draft]
        args += [
            "--speculative-num-steps",
            str(shape.num_steps),
            "--speculative-eagle-topk",
            str(shape.eagle_topk),
        ]
        args += ["--speculative-num-draft-tokens", str(shape.num_draft_tokens)]
    args += _optional_args(params)
    if not params.cuda_graphs:
        args.append(CUDA_GRAPH_OFF_FLAG)
    return args + list(params.extra_args)


def _reference_args(params: LaunchParams, shape: SpecShape | None) -> list[str]:
    args = ["--model", params.model, "--host", params.host, "--port", str(params.port)]
    args += ["--log-level", params.log_level]
    threads = params.env.get("OMP_NUM_THREADS", "")
    if threads.isdigit():  # torch would honour it, but the engine sets its thread count explicitly
        args += ["--cpu-threads", threads]
    if params.draft is not None and shape is not None:
        args += ["--draft", params.draft, "--depth", str(shape.num_steps)]
    return args + _optional_args(params, include_memory=False)


def _optional_args(params: LaunchParams, *, include_memory: bool = True) -> list[str]:
    args: list[str] = ["--trust-remote-code"] if params.trust_remote_code else []
    if include_memory and params.mem_fraction_static is not None:
        args += ["--mem-fraction-static", str(params.mem_fraction_static)]
    if params.context_length is not None:
        args += ["--context-length", str(params.context_length)]
    if params.max_running_requests is not None:
        args += ["--max-running-requests", str(params.max_running_requests)]
    return args
