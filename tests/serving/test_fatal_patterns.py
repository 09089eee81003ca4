"""Start-up log lines: real SGLang 0.5.14 lines seen on an H200 that are harmless must not count as fatal."""

from __future__ import annotations

import pytest

from drafting import sglang_facts


def fatal(line: str) -> str | None:
    for pattern in sglang_facts.FATAL_LOG_PATTERNS:
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


def test_the_exception_line_past_a_long_traceback_is_named() -> None:
    # As on the H200 (bench/results/h200_draft-dtype-smoke_eyas-0.1.0_sglang-0.5.14.json): a CUDA-graph
    # capture traceback longer than the quoted context; the line that names the cause closes it.
    from drafting.serving.launch.server_log import ServerLog

    log = ServerLog()
    log.feed("[2026-12-01 21:30:13] Scheduler hit an exception: Traceback (most recent call last):")
    for frame in range(60):
        log.feed(f'  File "/site/sglang/srt/model_executor/cuda_graph_runner.py", line {frame}, in capture')
        log.feed("    return forward_call(*args, **kwargs)")
    log.feed("RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::Half")
    log.feed("")
    log.feed("Exception: Capture cuda graph failed: expected mat1 and mat2 to have the same dtype")
    log.feed(
        "[2026-12-01 21:30:14] Received sigquit from a child process. It usually means the child failed."
    )
    assert (
        log.cause() == "Exception: Capture cuda graph failed: expected mat1 and mat2 to have the same dtype"
    )
    lines = log.explaining_lines()
    assert lines[0].endswith("Traceback (most recent call last):")
    assert lines[-1] == log.cause()


def test_no_exception_line_means_no_cause() -> None:
    from drafting.serving.launch.server_log import ServerLog

    log = ServerLog()
    log.feed("Decode batch, #running-req: 1, accept len: 2.50")
    log.feed("errors: none so far")  # a word, not an exception line
    assert log.cause() is None
