"""Params of the launch stage: a typed SGLang (or reference engine) server spec.

Only pydantic and the standard library here, so the API validates a spec at submit time. The deeper checks
(flags SGLang does not know, the draft's config, the host's port and /dev/shm) live in drafting.serving and
report findings with fixes rather than raising, so a dry run can show all of them at once.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from contract.params.common import HostPath, StageParams

Engine = Literal["sglang", "reference", "auto"]
Algorithm = Literal["EAGLE3", "EAGLE"]

# Environment variables a launch may set. Others (LD_PRELOAD, PYTHONPATH, PATH…) would change what runs.
ENV_PREFIXES = (
    "NCCL_",
    "SGLANG_",
    "CUDA_",
    "TORCH_",
    "PYTORCH_",
    "HF_",
    "TRANSFORMERS_",
    "OMP_",
    "MKL_",
    "TRITON_",
    "FLASHINFER_",
    "TOKENIZERS_",
)
# Set by eyas from the job's GPU lease: a spec that sets it would run outside the lease.
ENV_OWNED_BY_EYAS = frozenset({"CUDA_VISIBLE_DEVICES"})
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_HOST = re.compile(r"^[A-Za-z0-9.:\-]{1,253}$")

# Flags whose value names a file or folder SGLang reads; besides these, any value that starts with '/' counts.
PATH_FLAG_SUFFIXES = (
    "-path",
    "-paths",
    "-file",
    "-dir",
    "-config",
    "-map",
    "-keyfile",
    "-certfile",
    "-template",
)
MAX_EXTRA_ARGS = 64

# Flags eyas renders from typed fields, with every alias SGLang accepts: extra_args may not set them again.
OWNED_FLAGS: dict[str, str] = {
    "--model-path": "model",
    "--model": "model",
    "--host": "host",
    "--port": "port",
    "--tp-size": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--log-level": "log_level",
    "--speculative-algorithm": "algorithm",
    "--speculative-draft-model-path": "draft",
    "--speculative-draft-model": "draft",
    "--speculative-num-steps": "depth (or num_steps)",
    "--speculative-eagle-topk": "depth (or eagle_topk)",
    "--speculative-num-draft-tokens": "depth (or num_draft_tokens)",
    "--mem-fraction-static": "mem_fraction_static",
    "--context-length": "context_length",
    "--max-running-requests": "max_running_requests",
    "--trust-remote-code": "trust_remote_code",
}

FORBIDDEN_FLAGS: dict[str, str] = {
    "--config": "reads flags from a YAML file that eyas's checks never see; put the flags in extra_args",
}

# argparse actions that print and exit 0 instead of serving (help, version): the stage would "succeed" with no
# server. SGLang 0.5.x defines only -h/--help of these; --version is refused too, whoever adds it.
EXITING_FLAGS: dict[str, str] = {
    "-h": "prints SGLang's help and exits 0 without serving",
    "--help": "prints SGLang's help and exits 0 without serving",
    "--version": "prints a version and exits 0 without serving",
}

# Flags that switch SGLang's decode CUDA graphs off. The `cuda_graphs` field owns that choice, so a result can
# say whether graphs were on and why not: speedups measured without graphs say little about a deployment (a
# small target's decoding is then bound by kernel launches). `--disable-cuda-graph` is what eyas renders: it
# works in every SGLang 0.5.x (deprecated, still honoured, from 0.5.14); the others are newer spellings.
CUDA_GRAPH_OFF_FLAG = "--disable-cuda-graph"
GRAPH_OFF_FLAGS = (CUDA_GRAPH_OFF_FLAG, "--disable-decode-cuda-graph")
GRAPH_BACKEND_FLAG = "--cuda-graph-backend-decode"  # full | breakable | disabled
GRAPH_CONFIG_FLAG = "--cuda-graph-config"  # JSON; {"decode": {"backend": "disabled"}} turns graphs off
_GRAPH_FIX = "set cuda_graphs false with cuda_graphs_off_reason instead (the result then says why)"

_HOST_PATH: TypeAdapter[str] = TypeAdapter(HostPath)


class LaunchParams(StageParams):
    engine: Engine = Field(
        "auto", description="sglang, reference, or auto (sglang when installed with a GPU)"
    )
    model: HostPath = Field(description="target model folder (HF layout)")
    draft: HostPath | None = Field(
        None, description="drafter folder in SGLang's layout; none = no speculation"
    )
    depth: int | None = Field(
        None, ge=1, le=64, description="chain depth k: k steps, topk 1, k+1 draft tokens"
    )
    num_steps: int | None = Field(
        None, ge=1, le=64, description="--speculative-num-steps (with topk, tokens)"
    )
    eagle_topk: int | None = Field(None, ge=1, le=64, description="--speculative-eagle-topk")
    num_draft_tokens: int | None = Field(None, ge=2, le=1024, description="--speculative-num-draft-tokens")
    algorithm: Algorithm | None = Field(
        None, description="inferred from the draft's architectures when unset"
    )
    tp_size: int = Field(1, ge=1, le=64, description="tensor parallel size (= GPUs the server holds)")
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    context_length: int | None = Field(None, ge=1, le=16_777_216)
    max_running_requests: int | None = Field(None, ge=1, le=65_536)
    port: int = Field(30000, ge=1024, le=65535)
    host: str = Field("127.0.0.1", description="address the server binds")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    env: dict[str, str] = Field(default_factory=dict, description="allow-listed environment variables")
    extra_args: list[str] = Field(default_factory=list, description="more SGLang flags, one token per item")
    cuda_graphs: bool = Field(
        True,
        description="SGLang captures CUDA graphs, as deployments run; false renders --disable-cuda-graph and "
        "needs cuda_graphs_off_reason",
    )
    cuda_graphs_off_reason: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="why CUDA graphs are off (kept in the launch and benchmark results); required when off",
    )
    trust_remote_code: bool = Field(
        False,
        description="--trust-remote-code: the engine may run the target folder's own Python code (SGLang "
        "reads a custom tokenizer or config that way); the worker host must allow it "
        "(EYAS_ALLOW_REMOTE_CODE)",
    )
    dry_run: bool = Field(False, description="render and check only; start nothing")
    ready_timeout_s: float = Field(
        900, gt=0, le=7200, description="deadline for /health_generate to answer 200"
    )
    stop_grace_s: float = Field(30, ge=0, le=600, description="SIGTERM → SIGKILL grace when stopping")

    @field_validator("host")
    @classmethod
    def _valid_host(cls, value: str) -> str:
        if not _HOST.match(value):
            raise ValueError("host must be an IP address or a host name")
        return value

    @field_validator("env")
    @classmethod
    def _allowed_env(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"env name {name!r} is not an upper-case variable name")
            if name in ENV_OWNED_BY_EYAS:
                raise ValueError(f"{name} is set by eyas from the job's GPUs; remove it")
            if not name.startswith(ENV_PREFIXES):
                raise ValueError(f"env {name} is not allowed (allowed prefixes: {', '.join(ENV_PREFIXES)})")
            if len(value) > 4096 or _CONTROL_CHARS.search(value):
                raise ValueError(f"env {name}: value longer than 4096 characters or with control characters")
        return env

    @field_validator("extra_args")
    @classmethod
    def _plain_tokens(cls, args: list[str]) -> list[str]:
        if len(args) > MAX_EXTRA_ARGS:
            raise ValueError(f"at most {MAX_EXTRA_ARGS} extra_args")
        for arg in args:
            if not arg or len(arg) > 4096 or _CONTROL_CHARS.search(arg):
                raise ValueError(f"extra_args item {arg[:40]!r} is empty, too long or has control characters")
            if (problem := exiting_flag_problem(arg.partition("=")[0])) is not None:
                raise ValueError(f"extra_args: {problem}")
            if arg.startswith("--") and (problem := _owned_flag_problem(arg.partition("=")[0])):
                raise ValueError(problem)
        return args

    @model_validator(mode="after")
    def _cuda_graph_choice(self) -> LaunchParams:
        if not self.cuda_graphs and not (self.cuda_graphs_off_reason or "").strip():
            raise ValueError(
                "cuda_graphs is false: say why in cuda_graphs_off_reason (graphs off make a small target's "
                "decoding launch-bound, so the speedups measured say little about a deployment)"
            )
        if self.cuda_graphs and self.cuda_graphs_off_reason is not None:
            raise ValueError("cuda_graphs_off_reason is set but cuda_graphs is true: set cuda_graphs false")
        if (problem := graph_flag_conflict(self.extra_args, graphs_on=self.cuda_graphs)) is not None:
            raise ValueError(problem)
        return self

    def needs_gpus(self) -> bool:
        return self.engine != "reference"

    def gpus_optional(self) -> bool:
        return self.engine == "auto"  # falls back to the reference engine on a host without GPUs

    def gpus_needed(self) -> int:
        """GPUs to lease for this server (0 for the reference engine, which runs on the CPU)."""
        return self.tp_size if self.needs_gpus() else 0

    def host_paths(self) -> list[str]:
        # Relative values are refused by the launch checks; only absolute ones can be checked against roots.
        named = [path for _, path in extra_arg_paths(self.extra_args) if path.startswith("/")]
        return super().host_paths() + named


def exiting_flag_problem(flag: str) -> str | None:
    """Why `flag` (-h, --help, --version, or an abbreviation argparse would expand to one) is refused."""
    if flag in EXITING_FLAGS:
        return f"{flag} {EXITING_FLAGS[flag]}; remove it"
    for exiting in EXITING_FLAGS:
        if exiting.startswith("--") and len(flag) >= 4 and exiting.startswith(flag):
            return f"{flag} abbreviates {exiting}, which {EXITING_FLAGS[exiting]}; remove it"
    return None


def _owned_flag_problem(flag: str) -> str | None:
    """Refuse flags eyas renders itself, and any abbreviation of them (argparse accepts unique prefixes)."""
    if flag in FORBIDDEN_FLAGS:
        return f"extra_args: {flag} {FORBIDDEN_FLAGS[flag]}"
    if flag in OWNED_FLAGS:
        return f"extra_args: {flag} is rendered by eyas; set the `{OWNED_FLAGS[flag]}` field instead"
    for owned in (*OWNED_FLAGS, *FORBIDDEN_FLAGS):
        if len(flag) >= 4 and owned.startswith(flag):
            return f"extra_args: {flag} abbreviates {owned}, which eyas renders or refuses"
    return None


def graph_flag_conflict(args: list[str], *, graphs_on: bool) -> str | None:
    """Why extra_args may not decide CUDA graphs: switching them off belongs to the `cuda_graphs` field, and
    a decode backend given while the field says off contradicts it (abbreviations count: argparse expands a
    unique prefix)."""
    for index, arg in enumerate(args):
        flag, has_inline, inline = arg.partition("=")
        value = inline if has_inline else (args[index + 1] if index + 1 < len(args) else "")
        if _abbreviates(flag, GRAPH_OFF_FLAGS) is not None:
            return f"extra_args: {flag} turns CUDA graphs off behind the `cuda_graphs` field; {_GRAPH_FIX}"
        if _abbreviates(flag, (GRAPH_BACKEND_FLAG,)) is not None:
            if value == "disabled":
                return f"extra_args: {flag} disabled turns CUDA graphs off; {_GRAPH_FIX}"
            if not graphs_on:
                return f"extra_args: {flag} {value} asks for decode graphs but cuda_graphs is false"
        if _abbreviates(flag, (GRAPH_CONFIG_FLAG,)) and _decode_backend(value) == "disabled":
            return f"extra_args: {flag} disables the decode CUDA graph; {_GRAPH_FIX}"
    return None


def _abbreviates(flag: str, names: tuple[str, ...]) -> str | None:
    return next((name for name in names if flag == name or (len(flag) >= 4 and name.startswith(flag))), None)


def _decode_backend(value: str) -> str | None:
    try:
        config = json.loads(value)
    except ValueError:
        return None  # not JSON: SGLang's parser reports it
    decode = config.get("decode") if isinstance(config, dict) else None
    backend = decode.get("backend") if isinstance(decode, dict) else None
    return backend if isinstance(backend, str) else None


def extra_arg_paths(args: list[str]) -> list[tuple[str, str]]:
    """(flag, value) for every extra_args value that names a file: values of path flags and absolute paths."""
    found: list[tuple[str, str]] = []
    flag = ""
    for arg in args:
        if arg.startswith("--"):
            flag, _, inline = arg.partition("=")
            if inline and _names_file(flag, inline):
                found.append((flag, inline))
            continue
        if _names_file(flag, arg):
            found.append((flag, arg))
    return found


def _names_file(flag: str, value: str) -> bool:
    if value.startswith("/"):
        return True
    is_inline_data = value.startswith(("{", "[")) or "://" in value
    is_number = value.replace(".", "", 1).isdigit()
    return flag.endswith(PATH_FLAG_SUFFIXES) and not is_inline_data and not is_number


def path_problem(value: str) -> str | None:
    """Why a file-naming extra_args value is refused (None when it is a clean absolute path)."""
    try:
        _HOST_PATH.validate_python(value)
    except ValidationError as exc:
        return "; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors())
    return None
