"""The pieces of generate without a server: the template probe, reading each prompt format (and each bad
record's reason), the resumable output file, and the self-prompt filter."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli.demo.constructed import build_tokenizer
from contract.params.generate import SelfPromptParams
from drafting.generation.client import Completion
from drafting.generation.inputs import Conversation, Rejected, count_records, read_prompts
from drafting.generation.openers import TASK_OPENERS
from drafting.generation.output import DurableWriter, OutputMismatch, prepare_output, self_key
from drafting.generation.runner import turn_seed
from drafting.generation.self_prompts import SelfPromptPlan
from drafting.generation.template import template_facts
from drafting.userfiles import UserFileError
from tests.generation.conftest import write_prompts

END_OF_TURN = 3  # `<|end|>` in the demo tokenizer


def test_the_template_probe_finds_the_end_of_turn_token_and_the_user_prefix() -> None:
    facts = template_facts(build_tokenizer())
    assert facts.stop_ids == frozenset({END_OF_TURN})
    assert facts.user_stop_ids == frozenset({END_OF_TURN})
    assert facts.user_prefix == "<s><|user|> "


def test_a_plain_text_closing_is_not_a_stop_token() -> None:
    tokenizer = build_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} w0 {% endfor %}"
    assert template_facts(tokenizer).stop_ids == frozenset()


def test_every_prompt_format_becomes_the_turns_to_ask(tmp_path: Path) -> None:
    path = write_prompts(
        tmp_path / "p.jsonl",
        [
            {
                "id": "chat-1",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "w1"},
                    {"role": "assistant", "content": "an old answer"},
                    {"role": "user", "content": "w2"},
                ],
            },
            {"conversations": [{"from": "human", "value": "w3"}, {"from": "gpt", "value": "old"}]},
            {"question_id": 81, "category": "writing", "turns": ["w4", "w5"]},
            {"text": "w6 w7"},
        ],
    )
    chat, sharegpt, mtbench, text = list(read_prompts(path, multi_turn=True, limit=None))
    assert isinstance(chat, Conversation)
    assert [m["role"] for m in chat.messages] == ["system", "user", "user"]
    assert chat.key == "chat-1"
    assert chat.user_turns == 2
    assert isinstance(sharegpt, Conversation)
    assert sharegpt.messages == ({"role": "user", "content": "w3"},)
    assert sharegpt.key.startswith("sha256:")
    assert isinstance(mtbench, Conversation)
    assert (mtbench.key, mtbench.category, mtbench.user_turns) == ("81", "writing", 2)
    assert isinstance(text, Conversation)
    assert text.messages == ({"role": "user", "content": "w6 w7"},)
    first_only = list(read_prompts(path, multi_turn=False, limit=None))
    assert all(isinstance(c, Conversation) and c.user_turns == 1 for c in first_only)
    assert first_only[0].messages[0]["role"] == "system"  # type: ignore[union-attr]
    assert first_only[1].key == sharegpt.key  # type: ignore[union-attr]  # the key of the turns asked


def test_each_bad_record_gets_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    rows = [
        "not json",
        json.dumps(["a list"]),
        json.dumps({"messages": [{"role": "wizard", "content": "w1"}]}),
        json.dumps({"messages": [{"role": "user", "content": 7}]}),
        json.dumps({"messages": [{"role": "tool", "content": "{}"}, {"role": "user", "content": "w1"}]}),
        json.dumps({"messages": [{"role": "user", "content": "   "}]}),
        json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}),
        '{"text": "w1 \\ud800"}',
        json.dumps({"id": "x", "text": "w1"}),
        json.dumps({"id": "x", "text": "w2"}),
    ]
    path.write_bytes(("\n".join(rows) + "\n").encode() + b'{"text": "caf\xe9"}\n\n')
    got = list(read_prompts(path, multi_turn=True, limit=None))
    reasons = [g.reason if isinstance(g, Rejected) else "ok" for g in got]
    assert reasons == [
        "malformed_record",
        "malformed_record",
        "unknown_role",
        "non_text_content",
        "unsupported_role",
        "empty_user_turn",
        "no_user_turn",
        "invalid_text",
        "ok",
        "duplicate",
        "not_utf8",
    ]
    assert [g.line for g in got if isinstance(g, Rejected)][-1] == 11
    assert count_records(path) == 11  # the blank line is not a record


def test_limit_counts_usable_records(tmp_path: Path) -> None:
    path = write_prompts(
        tmp_path / "p.jsonl", ["junk", {"text": "w1"}, "junk", {"text": "w2"}, {"text": "w3"}]
    )
    got = list(read_prompts(path, multi_turn=True, limit=2))
    assert [type(g).__name__ for g in got] == ["Rejected", "Conversation", "Rejected", "Conversation"]


def record_line(key: str, source: str = "prompts", user: str = "w1") -> bytes:
    record = {
        "id": key,
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": "w2"}],
        "generation": {"source": source},
    }
    return (json.dumps(record) + "\n").encode()


def test_resume_keeps_whole_lines_byte_for_byte_and_cuts_a_half_written_one(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    whole = record_line("a") + record_line(self_key(4), "self_prompts", "w0 w1") + record_line("b")
    output.write_bytes(whole + b'{"id": "c", "messa')
    existing = prepare_output(output, resume=True)
    assert existing.keys == {"a", "b", self_key(4)}
    assert existing.self_prompts == ["w0 w1"]
    assert existing.next_self_index == 5
    assert existing.discarded_bytes == len(b'{"id": "c", "messa')
    assert output.read_bytes() == whole
    writer = DurableWriter(output)
    writer.write({"id": "c", "messages": []})
    writer.close()
    assert output.read_bytes().startswith(whole)
    assert prepare_output(output, resume=True).keys == {"a", "b", "c", self_key(4)}


def test_a_foreign_line_is_refused_and_resume_false_starts_afresh(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    output.write_bytes(record_line("a") + b'{"text": "not ours"}\n' + record_line("b"))
    with pytest.raises(OutputMismatch, match="line 2 is not a record generate wrote"):
        prepare_output(output, resume=True)
    assert prepare_output(output, resume=False).records == 0
    assert output.read_bytes() == b""


def test_an_output_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UserFileError, match="FIFO"):
        prepare_output(fifo, resume=True)


def answer(text: str, finish: str = "stop") -> Completion:
    return Completion(text=text, finish=finish, completion_tokens=3, prompt_tokens=2)


def test_self_prompts_are_filtered_by_end_length_and_duplication() -> None:
    params = SelfPromptParams(count=5, min_chars=5, max_chars=24)
    plan = SelfPromptPlan.resumed(params, ["Already kept?"], next_index=3)
    assert (plan.needed, plan.first_index) == (4, 3)
    verdicts = [
        plan.judge(answer("What is w1, and why?", finish="length"))[0],
        plan.judge(answer("  \n"))[0],
        plan.judge(answer("w1"))[0],
        plan.judge(answer("w1 " * 10))[0],
        plan.judge(answer(" Why is w1 before w2? "))[0],
        plan.judge(answer("Why is w1 before w2?"))[0],
        plan.judge(answer("why IS w1 before... w2"))[0],
        plan.judge(answer("already kept"))[0],
    ]
    assert verdicts == [
        "prompt_truncated",
        "prompt_empty",
        "prompt_too_short",
        "prompt_too_long",
        None,
        "prompt_duplicate",
        "prompt_near_duplicate",
        "prompt_near_duplicate",
    ]


def test_openers_are_taken_in_turn_by_attempt_and_begin_the_user_turn() -> None:
    plan = SelfPromptPlan.resumed(SelfPromptParams(count=4, openers=["Solve:", "Write a poem"]), [], 3)
    assert [plan.opener(i) for i in (3, 4, 5)] == ["Write a poem", "Solve:", "Write a poem"]
    assert plan.judge(answer(" 2 + 2 = ?"), "Solve:") == (None, "Solve: 2 + 2 = ?")
    assert plan.judge(answer("  "), "Solve:")[0] == "prompt_empty"
    assert plan.judge(answer(" 2 + 2 = ?"), "Solve:")[0] == "prompt_duplicate"
    assert SelfPromptPlan.resumed(SelfPromptParams(count=1), [], 0).opener(7) == ""
    tasks = SelfPromptPlan.resumed(SelfPromptParams(count=8, openers="tasks"), [], 0)
    assert tasks.openers[:8] == tuple(kind[0] for kind in TASK_OPENERS.values())  # every kind, early
    assert sorted(tasks.openers) == sorted(o for kind in TASK_OPENERS.values() for o in kind)


def test_seeds_depend_on_the_record_and_turn_only() -> None:
    assert turn_seed(0, "a", 0) == turn_seed(0, "a", 0)
    seeds = {turn_seed(0, "a", 0), turn_seed(0, "a", 1), turn_seed(0, "b", 0), turn_seed(1, "a", 0)}
    assert len(seeds) == 4
    assert all(0 <= seed < 2**63 for seed in seeds)
