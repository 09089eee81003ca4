"""What eyas knows about SGLang, as data: its versions, the draft checkpoint each release loads, the context
length it derives, its command line and its logs (source: shared/reference/sglang-eagle3.md).

The one home of these facts: checkpoint/ and serving/ import them from here. Version-specific facts are keyed
by version where they differ, so a new SGLang release is a data change. The GPU host runs SGLang 0.5.14
(shared/gpu/README.md); the venv here has 0.5.23 for its parser.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contract.params.checkpoint import SGLANG_VERSION_PATTERN
from contract.params.launch import FORBIDDEN_FLAGS as FORBIDDEN_FLAGS  # re-exported: part of these rules
from contract.params.launch import OWNED_FLAGS as OWNED_FLAGS

# ---- Versions

Version = tuple[int, int, int]

SGLANG_VERSION_ON_GPU_HOST = "0.5.14"

_VERSION = re.compile(SGLANG_VERSION_PATTERN)  # the pattern the stage params validate with


def parse_version(text: str) -> Version:
    """'0.5.12', 'v0.5.12' or '0.5.12.post1' -> (0, 5, 12); ValueError otherwise."""
    stripped = text.strip()
    if not _VERSION.match(stripped):
        raise ValueError(f"not an SGLang version: {text!r} (expected e.g. 0.5.14)")
    major, minor, patch = (int(part) for part in re.findall(r"\d+", stripped)[:3])
    return major, minor, patch


def format_version(version: Version) -> str:
    return ".".join(str(part) for part in version)


# ---- What each release does with an EAGLE-3 draft checkpoint (one table keyed by version range)
#
# Every row was read from the released wheel's `sglang/srt/models/llama_eagle3.py` (and `models/llama.py`
# for the target side). A new SGLang release is a data change: read its `LlamaForCausalLMEagle3`, then add
# a row or widen the last one and move `VERIFIED_UP_TO`.

# Options a draft config can switch on. SGLang implements some of them from some release on.
FC_NORM = "fc_norm"  # per-aux RMSNorm before fc (EAGLE 3.1); legacy name `use_aux_norm`
NORM_OUTPUT = "norm_output"  # feed the normed hidden state to the next draft step
NORM_BEFORE_FC = "norm_before_fc"  # one RMSNorm over the concatenated aux states (`input_norm`)
NORM_BEFORE_RESIDUAL = "norm_before_residual"  # residual taken after hidden_norm (speculators option)

DRAFT_ARCHITECTURE = "LlamaForCausalLMEagle3"
DEFAULT_NUM_AUX = 3

# Module roots a draft's own weights live under; a name under one of them that SGLang cannot place is a
# lost weight (error), any other unplaced name is only clutter (warning).
DRAFT_WEIGHT_ROOTS = ("fc", "midlayer", "layers", "norm", "lm_head", "input_norm", "fc_norm", "embed_tokens")

# Prefixes trainers put in front of the names (DDP/accelerate `module.`, SpecForge's wrapper
# `draft_model.`, torch.compile `_orig_mod.`, FSDP); SGLang strips none of them.
TRAINER_PREFIXES = ("draft_model.", "module.", "_orig_mod.", "_fsdp_wrapped_module.", "model.")

# Tensors trainers save that no SGLang release uses: dropped by fix_keys.
UNUSED_BY_SGLANG = ("t2d", "verifier_lm_head.weight", "verifier_norm.weight")

# What each target class does with a draft's aux-layer ids, and what it captures, is in the support matrix
# (drafting/support_matrix, read per release from SGLang's model classes).


@dataclass(frozen=True)
class SGLangRules:
    """How one range of SGLang releases builds and loads `LlamaForCausalLMEagle3`."""

    first: Version
    last: Version | None  # inclusive; None means "and every later release"
    layer_module: str  # "midlayer" (params model.midlayer.*) or "layers" (model.layers.{i}.*)
    legacy_renames: tuple[tuple[str, str], ...]  # substring renames load_weights applies first
    max_layers: int | None
    num_aux_configurable: bool  # fc width = target_hidden * K with K from the config (else K = 3)
    options: frozenset[str]
    draft_window_flag: bool  # --speculative-draft-window-size applies to this draft class
    read_from: str

    def covers(self, version: Version) -> bool:
        return self.first <= version and (self.last is None or version <= self.last)

    def layer_prefix(self, index: int) -> str:
        """The parameter prefix SGLang gives decoder layer `index` (without `model.`)."""
        return "midlayer." if self.layer_module == "midlayer" else f"layers.{index}."


_LEGACY_RENAMES = (
    ("midlayer", "layers.0"),
    ("aux_norm_low", "fc_norm.0"),
    ("aux_norm_mid", "fc_norm.1"),
    ("aux_norm_high", "fc_norm.2"),
)

RULES: tuple[SGLangRules, ...] = (
    SGLangRules(
        first=(0, 5, 0),
        last=(0, 5, 11),
        layer_module="midlayer",
        legacy_renames=(),
        max_layers=1,
        num_aux_configurable=False,
        options=frozenset(),
        draft_window_flag=False,
        read_from="sglang 0.5.1, 0.5.5, 0.5.11 wheels",
    ),
    SGLangRules(
        first=(0, 5, 12),
        last=(0, 5, 16),
        layer_module="layers",
        legacy_renames=_LEGACY_RENAMES,
        max_layers=None,
        num_aux_configurable=True,
        options=frozenset({FC_NORM, NORM_OUTPUT}),
        draft_window_flag=True,
        read_from="sglang 0.5.12, 0.5.15, 0.5.16 wheels",
    ),
    SGLangRules(
        first=(0, 5, 17),
        last=None,
        layer_module="layers",
        legacy_renames=_LEGACY_RENAMES,
        max_layers=None,
        num_aux_configurable=True,
        options=frozenset({FC_NORM, NORM_OUTPUT, NORM_BEFORE_FC}),
        draft_window_flag=True,
        read_from="sglang 0.5.17, 0.5.18, 0.5.23 wheels",
    ),
)

VERIFIED_UP_TO: Version = (0, 5, 23)

# What every release loads: the layout fix_keys writes.
PORTABLE_LAYER_MODULE = "midlayer"


def rules_for(version: str | Version) -> SGLangRules:
    """The row that covers `version`; ValueError for releases before the table (0.5.0)."""
    parsed = parse_version(version) if isinstance(version, str) else version
    for rules in RULES:
        if rules.covers(parsed):
            return rules
    raise ValueError(
        f"SGLang {format_version(parsed)} is older than the releases eyas knows (0.5.0 and later)"
    )


def is_verified(version: str | Version) -> bool:
    """Whether the release lies inside the range somebody actually read."""
    parsed = parse_version(version) if isinstance(version, str) else version
    return parsed <= VERIFIED_UP_TO


# ---- Context length

# Keys SGLang reads for a model's context length, first found wins (utils/hf_transformers/common.py).
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
DEFAULT_CONTEXT_LENGTH = 2048


def rope_scaling(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The scaling dict SGLang reads: `rope_scaling`, else transformers 5's `rope_parameters`."""
    for key in ("rope_scaling", "rope_parameters"):
        value = config.get(key)
        if isinstance(value, dict):
            return value
    return None


def context_length(config: Mapping[str, Any]) -> int:
    """SGLang's get_context_length over a (text) config: the first length key, times the rope factor where
    it applies (not for llama3 scaling, nor where original_max_position_embeddings is stated)."""
    scaling = rope_scaling(config) or {}
    factor = scaling.get("factor", 1) or 1
    # transformers copies a legacy `type` into `rope_type` before SGLang reads it
    if (
        "original_max_position_embeddings" in scaling
        or scaling.get("rope_type", scaling.get("type")) == "llama3"
    ):
        factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        value = config.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(factor * value)
    return DEFAULT_CONTEXT_LENGTH


# ---- Command line, logs and leftovers

LAUNCH_MODULE = "sglang.launch_server"

# Speculative decoding turns an unset --max-running-requests into this (speculative_hook.py, all 0.5.x).
AUTO_MAX_RUNNING_REQUESTS = 48
# SGLang's default EAGLE-3 capture layers for a Llama-family target with n layers: [2, n//2, n-3] (llama.py).
DEFAULT_AUX_LAYERS = "2, n//2, n-3"
CONTEXT_OVERRIDE_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
# A request's sampling_seed is honoured only when the server runs with this flag (0.5.x io_struct/scheduler).
DETERMINISTIC_FLAG = "--enable-deterministic-inference"

# SGLang 0.5.14 derives a gRPC port as --port + 10000 (unless SGLANG_GRPC_PORT is set) and refuses to start
# when that passes 65535 (server_args.py `_handle_deprecated_args`); 0.5.23 no longer does. Seen on the H200:
# `ValueError: SGLANG_GRPC_PORT (68129) must be between 1 and 65535` for --port 58129.
GRPC_PORT_OFFSET = 10000
GRPC_PORT_ENV = "SGLANG_GRPC_PORT"
GRPC_PORT_VERSIONS = ("0.5.14",)
HIGHEST_PORT = 65535


def grpc_port_limit(version: str) -> int | None:
    """The highest --port this SGLang release starts with (no SGLANG_GRPC_PORT set), or None if unbounded."""
    known = any(version == v or version.startswith(v + ".") for v in GRPC_PORT_VERSIONS)
    return HIGHEST_PORT - GRPC_PORT_OFFSET if known else None


# Flags that are not SGLang's (mostly vLLM's), with what to use instead.
FOREIGN_FLAGS: dict[str, str] = {
    "--num-speculative-tokens": "use --speculative-num-steps/--speculative-eagle-topk/"
    "--speculative-num-draft-tokens (k, 1, k+1 for a chain): set eyas's `depth: k`",
    "--speculative-model": "use eyas's `draft` field (--speculative-draft-model-path)",
    "--speculative-config": "use eyas's `draft`, `depth` and `algorithm` fields",
    "--max-model-len": "use eyas's `context_length` field (--context-length)",
    "--gpu-memory-utilization": "use eyas's `mem_fraction_static` field (--mem-fraction-static)",
    "--max-num-seqs": "use eyas's `max_running_requests` field (--max-running-requests)",
}

# Flags SGLang parses and then never reads.
IGNORED_FLAGS: dict[str, str] = {
    "--num-continuous-decode-steps": "SGLang 0.5.x parses it and nothing reads it "
    "(its last use was removed in Nov 2024, #2095)",
}

# Flags that read more flags from a file eyas cannot check.

# Log levels above info hide the `accept len:` lines and the ready line (both INFO).
QUIET_LOG_LEVELS = ("warning", "error")

# /dev/shm names left by killed SGLang servers: psm_* before 0.5.14, sgl_shm_* from 0.5.14, plus the
# load snapshots and loky semaphores seen after a SIGKILL on the GPU host.
STALE_SHM_GLOBS = ("psm_*", "sgl_shm_*", "sglang_loads_*", "sem.loky-*")
MIN_SHM_FREE_MIB = 1024

# Draft architectures → the algorithm SGLang must be told.
DRAFT_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLMEagle3": "EAGLE3",
    "Eagle3DeepseekV2ForCausalLM": "EAGLE3",
    "LlamaForCausalLMEagle": "EAGLE",
    "Qwen2ForCausalLMEagle": "EAGLE",
    "MistralForCausalLMEagle": "EAGLE",
    "MistralLarge3ForCausalLMEagle": "EAGLE",
}
# Architectures of drafts saved by training libraries that SGLang cannot load before conversion.
UNCONVERTED_ARCHITECTURES = ("Eagle3Speculator", "Eagle3DraftModel", "EagleSpeculator")


@dataclass(frozen=True)
class FatalPattern:
    name: str
    regex: re.Pattern[str]
    hint: str


def _fatal(name: str, pattern: str, hint: str) -> FatalPattern:
    return FatalPattern(name, re.compile(pattern), hint)


# Lines after which the server will not become ready (sglang-eagle3.md §6.2; uvicorn's bind error).
FATAL_LOG_PATTERNS: tuple[FatalPattern, ...] = (
    _fatal("out_of_memory", r"CUDA out of memory|OutOfMemoryError", "lower mem_fraction_static or the batch"),
    _fatal("not_enough_memory", r"Not enough memory\. Please try to increase --mem-fraction-static", ""),
    _fatal("cuda_graph", r"Capture cuda graph failed", "lower mem_fraction_static or disable CUDA graphs"),
    _fatal("scheduler_exception", r"Scheduler hit an exception", ""),
    _fatal("init_failed", r"Initialization failed\. Please see the error messages above", ""),
    _fatal("scheduler_died", r"scheduler died during initialization", "often the OS OOM killer (exit -9)"),
    _fatal("child_failed", r"Received sigquit from a child process", ""),
    _fatal("address_in_use", r"[Aa]ddress already in use|Port is already in use", "pick another port"),
    _fatal("context_length", r"ValueError: .*context_length", f"set {CONTEXT_OVERRIDE_ENV}=1 or lower it"),
    _fatal(
        "weight_loading",
        # a missing generation_config.json is only a warning ("Proceeding without…", seen on an H200)
        r"SafetensorError|Error while deserializing|"
        r"does not appear to have a file named (?!generation_config)|"
        r"Can't load the model|No such file or directory: .*(safetensors|\.bin|config\.json)",
        "check the model and draft folders",
    ),
    _fatal("unknown_algorithm", r"Unknown speculative algorithm name", "use EAGLE3 for an EAGLE-3 draft"),
    _fatal("argparse", r"error: unrecognized arguments|error: argument ", "fix the flag the error names"),
)

ACCEPT_LEN = re.compile(r"accept len: ([0-9.]+)")
GEN_THROUGHPUT = re.compile(r"gen throughput \(token/s\): ([0-9.]+)")
READY_LINE = "The server is fired up and ready to roll!"
