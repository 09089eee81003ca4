"""What eyas knows about SGLang's command line and logs, as data (source: shared/reference/sglang-eagle3.md).

Version-specific facts sit here, keyed by version where they differ, so a new SGLang release is a data change.
The GPU host runs SGLang 0.5.14 (shared/gpu/README.md); the venv here has 0.5.23 for its parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract.params.launch import FORBIDDEN_FLAGS, OWNED_FLAGS  # noqa: F401 - part of these rules

SGLANG_VERSION_ON_GPU_HOST = "0.5.14"
LAUNCH_MODULE = "sglang.launch_server"

# Speculative decoding turns an unset --max-running-requests into this (speculative_hook.py, all 0.5.x).
AUTO_MAX_RUNNING_REQUESTS = 48
# SGLang's default EAGLE-3 capture layers for a Llama-family target with n layers: [2, n//2, n-3] (llama.py).
DEFAULT_AUX_LAYERS = "2, n//2, n-3"
CONTEXT_OVERRIDE_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
# Keys SGLang reads for a model's context length, first found wins (utils/hf_transformers/common.py).
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
DEFAULT_CONTEXT_LENGTH = 2048

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
