"""Chat-template rendering and assistant-only loss masks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from drafting.ml.conversations import (
    DropReason,
    SampleRejected,
    parse_record,
    tokenize_conversation,
    tokenize_file,
)
from testsupport.tiny_targets import build_tokenizer, chat, write_jsonl


def _masked_tokens(tokenizer, messages, max_len=512):  # type: ignore[no-untyped-def]
    sample = tokenize_conversation(tokenizer, messages, max_len=max_len, overlong="truncate")
    tokens = tokenizer.convert_ids_to_tokens(sample.input_ids)
    return [t for t, m in zip(tokens, sample.loss_mask, strict=True) if m], sample


def test_only_assistant_turns_and_their_end_marker_are_masked() -> None:
    tokenizer = build_tokenizer()
    messages = [
        {"role": "system", "content": "w1 w2"},
        {"role": "user", "content": "w3 w4"},
        {"role": "assistant", "content": "w5 w6 w7"},
        {"role": "user", "content": "w8"},
        {"role": "assistant", "content": "w9"},
    ]
    masked, sample = _masked_tokens(tokenizer, messages)
    assert masked == ["w5", "w6", "w7", "<|end|>", "w9", "<|end|>"]
    assert tokenizer.convert_ids_to_tokens(sample.input_ids)[:2] == ["<s>", "<|system|>"]
    assert not sample.truncated


def test_sharegpt_records_map_roles() -> None:
    record = '{"conversations": [{"from": "human", "value": "w1"}, {"from": "gpt", "value": "w2"}]}'
    assert parse_record(record) == [{"role": "user", "content": "w1"}, {"role": "assistant", "content": "w2"}]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", DropReason.MALFORMED),
        ('{"messages": []}', DropReason.MALFORMED),
        ('{"messages": [{"role": "narrator", "content": "w1"}]}', DropReason.UNKNOWN_ROLE),
        ('{"messages": [{"role": "user", "content": [{"type": "image"}]}]}', DropReason.NON_TEXT),
    ],
)
def test_bad_records_are_rejected_with_a_reason(line: str, reason: DropReason) -> None:
    with pytest.raises(SampleRejected) as caught:
        parse_record(line)
    assert caught.value.reason == reason


def test_truncation_keeps_a_prefix_or_drops_when_asked() -> None:
    tokenizer = build_tokenizer()
    messages = [{"role": "user", "content": "w1 w2"}, {"role": "assistant", "content": "w3 " * 30}]
    sample = tokenize_conversation(tokenizer, messages, max_len=10, overlong="truncate")
    assert len(sample.input_ids) == 10
    assert sample.truncated
    with pytest.raises(SampleRejected, match=DropReason.TOO_LONG.value):
        tokenize_conversation(tokenizer, messages, max_len=10, overlong="drop")
    with pytest.raises(SampleRejected, match=DropReason.NO_LOSS_TOKENS.value):
        tokenize_conversation(tokenizer, messages, max_len=5, overlong="truncate")


def test_templates_that_rewrite_earlier_turns_are_refused() -> None:
    tokenizer = build_tokenizer()
    # Like reasoning templates that drop old thoughts: the last turn renders differently from the prefixes.
    tokenizer.chat_template = (
        "{% for m in messages %}{% if loop.last %}LAST {% endif %}<|{{ m['role'] }}|> {{ m['content'] }} "
        "{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    messages = [{"role": "user", "content": "w1"}, {"role": "assistant", "content": "w2"}]
    with pytest.raises(SampleRejected, match=DropReason.TEMPLATE_UNSTABLE.value):
        tokenize_conversation(tokenizer, messages, max_len=64, overlong="truncate")


def test_tokenize_file_counts_every_outcome(tmp_path: Path) -> None:
    rng = random.Random(0)
    path = write_jsonl(
        tmp_path / "data.jsonl",
        [
            chat(rng, 1),
            "{bad",
            {"messages": [{"role": "user", "content": "w1"}]},
            chat(rng, 2, sharegpt=True),
        ],
    )
    samples, summary = tokenize_file(path, build_tokenizer(), max_len=512, overlong="truncate")
    assert len(samples) == summary.kept == 2
    assert summary.records == 4
    assert summary.dropped == {"malformed_record": 1, "no_assistant_turn": 1}
    assert summary.examples["malformed_record"].startswith("line 2")
    assert summary.loss_tokens == sum(sum(s.loss_mask) for s in samples)
    limited, _ = tokenize_file(path, build_tokenizer(), max_len=512, overlong="truncate", limit=1)
    assert len(limited) == 1
