"""Start-up log lines: real SGLang 0.5.14 lines seen on an H200 that are harmless must not count as fatal."""

from __future__ import annotations

import pytest

from workers.serving import sglang_rules


def fatal(line: str) -> str | None:
    for pattern in sglang_rules.FATAL_LOG_PATTERNS:
        if pattern.regex.search(line):
            return pattern.name
    return None


@pytest.mark.parametrize(
    "line",
    [
        # an EAGLE-3 draft folder has no generation_config.json; SGLang 0.5.14 warns and goes on
        "[2026-11-29 09:58:35] Failed to load generation config for /tmp/d/sglang_draft: /tmp/d/sglang_draft"
        " does not appear to have a file named generation_config.json. Checkout 'https://huggingface.co//tmp"
        "/d/sglang_draft/tree/main' for available files.. Proceeding without generation config.",
        "[2026-11-29 09:58:35] Ignore import error when loading sglang.srt.models.deepseek_v2: No module "
        "named 'flashinfer'",
        "[2026-11-29 09:58:36] Load weight begin. avail mem=139.13 GB",
    ],
)
def test_harmless_lines_seen_on_a_real_server(line: str) -> None:
    assert fatal(line) is None


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("OSError: /m does not appear to have a file named config.json.", "weight_loading"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out_of_memory"),
        (
            "[Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
            "address already in use",
            "address_in_use",
        ),
    ],
)
def test_fatal_lines_are_still_caught(line: str, name: str) -> None:
    assert fatal(line) == name
