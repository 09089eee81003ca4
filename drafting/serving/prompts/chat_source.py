"""Where a stage finds the chat template its chat prompts are rendered with: the target's tokenizer.

eval and a benchmark sweep know the target folder. A single-mode benchmark knows only a URL; there the
server is asked which tokenizer it loaded (SGLang's and the reference engine's /get_model_info), and that
folder is used when it exists on this host: the same tokenizer the server itself tokenizes with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from drafting.prompting.chat import has_chat_template
from drafting.userfiles import check_model_folder

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def has_tokenizer(folder: str | Path) -> bool:
    return any((Path(folder) / name).exists() for name in TOKENIZER_FILES)


def load_tokenizer(folder: str | Path) -> Any:
    """The transformers tokenizer in `folder` (ValueError naming the folder when it has none)."""
    if not has_tokenizer(folder):
        raise ValueError(f"{folder} has no tokenizer (none of {', '.join(TOKENIZER_FILES)})")
    check_model_folder(folder, "tokenizer folder")  # transformers would block on a FIFO among its files
    from drafting.ml.text_model import load_tokenizer as load_folder_tokenizer

    return load_folder_tokenizer(folder)


def raw_text_note(prompts: Sequence[Any], tokenizer_folder: str | Path | None) -> str | None:
    """A warning when prompts go as raw text to a target whose tokenizer has a chat template. A drafter
    trained on chat conversations then reads text it never saw, and acceptance reads low: eyas's demo
    drafter accepted 1.55 at depth 3 on its prompts as raw text, 4.00 on the same words asked as chat turns
    (docs/training.md; a constructed target: the size of the effect). Token-id prompts are sent as given,
    on purpose, and are not counted."""
    raw = sum(1 for p in prompts if p.messages is None and p.input_ids is None)
    if not raw or tokenizer_folder is None or not has_tokenizer(tokenizer_folder):
        return None
    if not has_chat_template(load_tokenizer(tokenizer_folder)):
        return None
    return (
        f"{raw} of {len(prompts)} prompts are raw text, sent without the target's chat template: a drafter "
        "trained on chat conversations reads them as text it never saw, and acceptance reads low. For chat "
        'traffic give chat records ({"messages": [...]}, ShareGPT conversations or MT-Bench turns)'
    )


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
    if params.mode != "single" and launch is not None:
        return str(launch.model)
    if params.url is None:
        return None
    return server_tokenizer_folder(params.url, timeout_s=10)
