"""Prompt records in every format users bring, and what eval and benchmark ask of each."""

from __future__ import annotations

import json

import pytest

from cli.demo.constructed import build_tokenizer
from drafting.prompting.chat import (
    evaluation_messages,
    messages_through_user_turn,
    prompt_text,
    render_ids,
    render_messages,
)
from drafting.prompting.records import RecordError, parse_line


def test_each_format_parses_to_the_same_messages() -> None:
    openai = parse_line(json.dumps({"messages": [{"role": "user", "content": "a"}], "id": 7}))
    sharegpt = parse_line(json.dumps({"conversations": [{"from": "human", "value": "a"}]}))
    mtbench = parse_line(json.dumps({"question_id": 81, "category": "writing", "turns": ["a", "b"]}))
    text = parse_line(json.dumps({"text": "a", "max_new_tokens": 5}))
    assert openai.messages == sharegpt.messages == ({"role": "user", "content": "a"},)
    assert (openai.format, sharegpt.format, mtbench.format, text.format) == (
        "messages",
        "conversations",
        "turns",
        "text",
    )
    assert openai.id == "7"
    assert (mtbench.id, mtbench.category, mtbench.user_turns) == ("81", "writing", ["a", "b"])
    assert (text.raw_text, text.max_new_tokens) == ("a", 5)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "malformed_record"),
        ("[1, 2]", "malformed_record"),
        ('{"messages": []}', "malformed_record"),
        ('{"turns": ["a", ""]}', "malformed_record"),
        ('{"messages": [{"role": "wizard", "content": "x"}]}', "unknown_role"),
        ('{"messages": [{"role": "user", "content": [1]}]}', "non_text_content"),
        ('{"text": "x", "max_new_tokens": 0}', "malformed_record"),
        ('{"prompt": "x"}', "malformed_record"),
    ],
)
def test_bad_records_get_a_stable_reason(line: str, reason: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_line(line)
    assert caught.value.reason == reason


def test_eval_asks_through_the_last_answerable_user_turn() -> None:
    user = lambda c: {"role": "user", "content": c}  # noqa: E731
    bot = lambda c: {"role": "assistant", "content": c}  # noqa: E731
    system = {"role": "system", "content": "s"}
    # MT-Bench: two questions, no answers: the second needs the first's answer, so only the first is asked
    assert evaluation_messages([user("q1"), user("q2")]) == ([user("q1")], 1)
    # a conversation that gives the answer: its second question is asked in context
    assert evaluation_messages([system, user("q1"), bot("a1"), user("q2")]) == (
        [system, user("q1"), bot("a1"), user("q2")],
        0,
    )
    # a finished conversation: the last answer is what the target is asked to give
    assert evaluation_messages([user("q1"), bot("a1")]) == ([user("q1")], 0)
    assert evaluation_messages([user("q1"), bot("a1"), user("q2"), user("q3")]) == (
        [user("q1"), bot("a1"), user("q2")],
        1,
    )
    with pytest.raises(RecordError, match="no user turn"):
        evaluation_messages([system, bot("a")])
    assert messages_through_user_turn([user("q1"), bot("a1"), user("q2")], 1)[-1] == user("q2")


def test_chat_records_render_with_the_template_and_text_stays_raw() -> None:
    tokenizer = build_tokenizer()  # the demo target's tokenizer and its chat template
    record = parse_line(json.dumps({"messages": [{"role": "user", "content": "w1 w2"}]}))
    rendered = render_messages(tokenizer, record.messages)
    assert rendered == "<s><|user|> w1 w2 <|end|> <|assistant|> "
    assert prompt_text(tokenizer, record) == rendered
    text, ids = render_ids(tokenizer, record.messages)
    assert text == rendered
    assert ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    raw = parse_line(json.dumps({"text": "w1 w2"}))
    assert prompt_text(tokenizer, raw) == "w1 w2"
    tokenizer.chat_template = None
    with pytest.raises(RecordError) as caught:
        render_messages(tokenizer, record.messages)
    assert caught.value.reason == "no_chat_template"
