"""Where a stage finds the chat template its chat prompts are rendered with: the target's tokenizer.

eval and a benchmark sweep know the target folder. A single-mode benchmark knows only a URL; there the
server is asked which tokenizer it loaded (SGLang's and the reference engine's /get_model_info), and that
folder is used when it exists on this host: the same tokenizer the server itself tokenizes with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from drafting.userfiles import check_model_folder

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def has_tokenizer(folder: str | Path) -> bool:
    return any((Path(folder) / name).exists() for name in TOKENIZER_FILES)


def load_tokenizer(folder: str | Path) -> Any:
    """The transformers tokenizer in `folder` (ValueError naming the folder when it has none)."""
    if not has_tokenizer(folder):
        raise ValueError(f"{folder} has no tokenizer (none of {', '.join(TOKENIZER_FILES)})")
    check_model_folder(folder, "tokenizer folder")  # transformers would block on a FIFO among its files
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def server_tokenizer_folder(url: str, *, timeout_s: float = 30) -> str | None:
    """The tokenizer folder a running server reports (tokenizer_path, else model_path) when it is a local
    folder holding a tokenizer; None when the server does not say or the folder is not on this host."""
    try:
        info = httpx.get(f"{url.rstrip('/')}/get_model_info", timeout=timeout_s).json()
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    for key in ("tokenizer_path", "model_path"):
        value = info.get(key)
        if isinstance(value, str) and value.startswith("/") and Path(value).is_dir() and has_tokenizer(value):
            return value
    return None


def benchmark_tokenizer_folder(params: Any) -> str | None:
    """Where a benchmark's chat prompts get their template: a sweep's target (the launch spec's model), a
    single-mode server's own report of what it loaded."""
    launch = getattr(params, "launch", None)
    if params.mode == "sweep" and launch is not None:
        return str(launch.model)
    if params.url is None:
        return None
    return server_tokenizer_folder(params.url, timeout_s=10)
