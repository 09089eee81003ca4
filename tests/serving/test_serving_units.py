"""Small pure parts: prompt sets, statistics, stream merging, the server log watcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from drafting.serving.benchmark.bench_stats import percentile, summarize
from drafting.serving.benchmark.load_client import (
    LoadOptions,
    RequestRecord,
    _merge_ids,
    request_body,
    requests_digest,
)
from drafting.serving.launch.server_log import ServerLog
from drafting.serving.prompts import Prompt, load_prompts


def test_builtin_prompt_set_loads() -> None:
    prompts = load_prompts()
    assert 12 <= len(prompts) <= 32
    assert all(p.text for p in prompts)
    assert len(load_prompts(limit=3)) == 3


def test_prompt_file_errors_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n\n{"input_ids": [1, -2]}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:3: input_ids"):
        load_prompts(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts(empty)


def test_the_requests_digest_names_what_was_asked_and_nothing_about_how_it_was_timed() -> None:
    """Two benchmarks pair up prompt by prompt only when they asked the same requests the same way."""
    prompts = [Prompt(text="héllo"), Prompt(input_ids=[5, 6], max_new_tokens=3)]
    same = requests_digest(prompts, LoadOptions(max_new_tokens=64))
    assert same == requests_digest(prompts, LoadOptions(max_new_tokens=64, stream=False, concurrency=8))
    assert len(same) == 64
    changed = [
        requests_digest(prompts, LoadOptions(max_new_tokens=65)),
        requests_digest(prompts, LoadOptions(max_new_tokens=64, ignore_eos=False)),
        requests_digest(prompts, LoadOptions(max_new_tokens=64, send_as="input_ids")),
        requests_digest(prompts[::-1], LoadOptions(max_new_tokens=64)),
        requests_digest([Prompt(text="hello"), prompts[1]], LoadOptions(max_new_tokens=64)),
    ]
    assert len({same, *changed}) == 6


def test_request_body_sends_text_or_bytes_as_ids() -> None:
    options = LoadOptions(max_new_tokens=7)
    text_body = request_body(Prompt(text="hé"), options, stream=True)
    assert text_body["text"] == "hé"
    assert text_body["sampling_params"] == {"max_new_tokens": 7, "temperature": 0.0, "ignore_eos": True}
    ids_body = request_body(Prompt(text="hé"), LoadOptions(send_as="input_ids"), stream=False)
    assert ids_body["input_ids"] == [104, 195, 169]
    assert request_body(Prompt(input_ids=[5, 6], max_new_tokens=3), options, stream=False)["input_ids"] == [
        5,
        6,
    ]


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([float(v) for v in range(101)], 99) == pytest.approx(99.0)


def test_cumulative_and_incremental_stream_chunks_give_the_same_ids() -> None:
    cumulative = RequestRecord(0)
    for ids in ([7], [7, 8, 9], [7, 8, 9, 10]):
        _merge_ids(cumulative, ids, len(ids), True)
    incremental, mode = RequestRecord(1), True
    for ids, count in (([7], 1), ([8, 9], 3), ([10], 4)):
        mode = _merge_ids(incremental, ids, count, mode)
    assert cumulative.output_ids == incremental.output_ids == [7, 8, 9, 10]


def test_summary_acceptance_is_total_completion_over_total_verify_steps() -> None:
    records = [
        RequestRecord(
            0, completion_tokens=10, spec_verify_ct=4, e2e_s=1.0, ttft_s=0.1, itl_s=[0.1] * 9, streamed=True
        ),
        RequestRecord(
            1, completion_tokens=30, spec_verify_ct=6, e2e_s=2.0, ttft_s=0.2, itl_s=[0.2] * 29, streamed=True
        ),
        RequestRecord(2, error="HTTP 500: boom"),
    ]
    summary = summarize(records, wall_s=2.0)
    assert summary["accept_len"] == 4.0
    assert summary["failed_requests"] == 1
    assert summary["output_tok_s"] == 20.0
    assert summary["timing"] == "stream"
    assert summary["ttft_p50_ms"] == pytest.approx(150.0)
    baseline = summarize([RequestRecord(0, completion_tokens=10, e2e_s=1.0)], wall_s=1.0)
    assert baseline["accept_len"] is None
    assert baseline["timing"] == "e2e"
    assert baseline["ttft_p50_ms"] is None


def test_server_log_finds_the_first_fatal_line_and_the_last_acceptance() -> None:
    log = ServerLog()
    log.feed(
        "[t] Decode batch, #running-req: 1, accept len: 2.31, accept rate: 0.44, "
        "gen throughput (token/s): 50.5"
    )
    log.feed("[t] Capture cuda graph failed: out of memory")
    log.feed("[t] Scheduler hit an exception: Traceback (most recent call last):")
    log.feed('  File "x.py", line 1')
    assert log.accept_len == 2.31
    assert log.gen_throughput == 50.5
    assert log.fatal is not None
    assert log.fatal.pattern.name == "cuda_graph"
    assert log.explaining_lines()[-1] == '  File "x.py", line 1'


def test_benign_lines_are_not_fatal() -> None:
    log = ServerLog()
    for line in ("Load weight end. elapsed=1.0 s", "Parameter x not found in params_dict", "warmup done"):
        log.feed(line)
    assert log.fatal is None
