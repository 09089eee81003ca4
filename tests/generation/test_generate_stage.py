"""The generate stage end to end on the CPU: the reference engine serving the constructed chat target, every
prompt format, multi-turn answers given the regenerated earlier ones, bad records with their reasons,
self prompts with deduplication and a length filter, a stop request, and resume after a kill."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from cli.demo.constructed import build_tokenizer
from contract.reasons import TerminationReason
from drafting.context import StageCancelled, StageError
from drafting.generation.output import OutputMismatch
from drafting.ml.conversations import tokenize_file
from drafting.stages import generate
from drafting.userfiles import UserFileError
from tests.generation.conftest import generate_params, output_records, received, write_prompts
from tests.generation.targets import END_ID, answer_words
from tests.ml.stage_process import run_stage_process
from tests.serving.conftest import RecordingContext, start_stage

CONTEXT = 64  # the engine's context length: a longer prompt is refused by the server


def test_every_format_multi_turn_and_bad_records(chatty: Path, tmp_path: Path) -> None:
    prompts = write_prompts(
        tmp_path / "prompts.jsonl",
        [
            {
                "id": "chat",
                "messages": [
                    {"role": "system", "content": "w9"},
                    {"role": "user", "content": "w1 w2"},
                    {"role": "assistant", "content": "stale"},
                    {"role": "user", "content": "w5"},
                ],
            },
            {"conversations": [{"from": "human", "value": "w3"}, {"from": "gpt", "value": "stale"}]},
            {"question_id": 81, "category": "writing", "turns": ["w7 w8", "w10"]},
            {"text": "w20 w21"},
            "not json",
            {"messages": [{"role": "wizard", "content": "w1"}]},
            {"id": "chat", "text": "w30"},
            {"text": " ".join(["w4"] * CONTEXT)},
        ],
    )
    output = tmp_path / "out" / "conversations.jsonl"
    params = generate_params(
        chatty,
        output,
        prompts=str(prompts),
        temperature=1.0,
        max_new_tokens=12,
        concurrency=3,
        self_prompts={"count": 1, "min_chars": 5, "max_attempts": 40},
        engine={"context_length": CONTEXT},
    )
    ctx = RecordingContext(work_dir=tmp_path)
    result = generate.run(ctx, params)

    everything = {r["id"]: r for r in output_records(output)}
    records = {key: r for key, r in everything.items() if r["generation"]["source"] == "prompts"}
    written_self = [r for r in everything.values() if r["generation"]["source"] == "self_prompts"]
    assert len(records) == 4
    assert len(written_self) == result["self_prompts"]["written"] == 1
    assert len(written_self[0]["messages"][0]["content"]) >= 5
    assert result["records"]["read"] == 8
    assert result["records"]["written"] == 5
    assert result["records"]["truncated"] == 0
    from_prompts = {k: n for k, n in result["dropped"].items() if not k.startswith("prompt_")}
    assert from_prompts == {"duplicate": 1, "malformed_record": 1, "request_refused": 1, "unknown_role": 1}
    assert result["drop_examples"]["unknown_role"] == {"where": "line 6", "detail": "role 'wizard'"}
    assert "context length" in result["drop_examples"]["request_refused"]["detail"]
    chat = records["chat"]["messages"]
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user", "assistant"]
    assert records["81"]["category"] == "writing"
    answers = [m["content"] for r in everything.values() for m in r["messages"] if m["role"] == "assistant"]
    assert len(answers) == 7
    assert all(a.strip() and "stale" not in a and "<|end|>" not in a for a in answers)
    assert all(
        r["generation"]["finish"] == ["stop"] * len(r["generation"]["finish"]) for r in everything.values()
    )

    # The second turn was asked with the first regenerated answer in its prompt.
    requests = received(ctx.lines)
    # six answers to the prompts (the one over the context is refused before the engine logs it), then the
    # self prompts' user turns and the one answer
    assert len(requests) == result["requests"] == 6 + result["self_prompts"]["attempts"] + 1
    second = next(r for r in requests if r["prompt"].endswith("<|user|> w5 <|end|> <|assistant|>"))
    assert f"<|assistant|> {chat[2]['content']} <|end|> <|user|> w5" in second["prompt"]
    assert all(r["stop_token_ids"] == [END_ID] and r["sampling_seed"] is not None for r in requests)

    assert result["finish_reasons"]["stop"] >= 7
    assert result["generated_tokens"] > 0
    assert result["tokens_per_s"] > 0
    assert result["engine"] == "reference"
    events = ctx.recording
    assert events.of_type("progress")[-1]["fraction"] == 1.0
    assert events.of_type("metric")[0]["name"] == "generate_tokens_per_s"
    assert events.of_type("artifact")[-1]["path"] == str(output)
    assert ctx.server_states()[-1] == "stopped"

    samples, summary = tokenize_file(output, build_tokenizer(), max_len=256, overlong="truncate")
    assert (len(samples), summary.kept) == (5, 5)  # extract reads what generate wrote


def test_self_prompts_dedupe_filter_and_resume_for_more(chatty: Path, tmp_path: Path) -> None:
    output = tmp_path / "self.jsonl"
    self_prompts = {"count": 3, "min_chars": 5, "max_chars": 11, "max_new_tokens": 6, "max_attempts": 80}
    params = generate_params(chatty, output, self_prompts=self_prompts, max_new_tokens=8, concurrency=3)
    first = generate.run(RecordingContext(work_dir=tmp_path), params)

    kept = output.read_bytes()
    users = [r["messages"][0]["content"] for r in output_records(output)]
    # The target starts every user turn at w0 and ends it with p 0.3 after each word: the turns within
    # 5..11 characters are exactly these three, each kept once.
    assert sorted(users) == ["w0 w1", "w0 w1 w2", "w0 w1 w2 w3"]
    assert first["self_prompts"]["written"] == 3
    assert first["self_prompts"]["attempts"] <= 80
    # three workers: between one and three requests were in flight on average, each took some time
    assert 1.0 < first["mean_in_flight"] <= 3.0, first
    assert 0 < first["mean_request_s"] < first["generation_s"]
    assert {"prompt_too_short", "prompt_duplicate"} <= set(first["dropped"])
    assert {"prompt_too_long", "prompt_truncated"} & set(first["dropped"])
    assert first["drop_examples"]["prompt_too_short"]["detail"] == "2 characters < min_chars 5: 'w0'"
    assert all(r["generation"]["source"] == "self_prompts" for r in output_records(output))

    more = {**self_prompts, "count": 4, "max_chars": 14, "max_attempts": 150}
    again = generate.run(
        RecordingContext(work_dir=tmp_path), generate_params(chatty, output, self_prompts=more)
    )
    assert output.read_bytes().startswith(kept)
    added = output_records(output)[3:]
    assert [r["messages"][0]["content"] for r in added] == ["w0 w1 w2 w3 w4"]
    assert again["resumed"]["kept"] == 3
    assert again["self_prompts"]["written"] == 1
    old_indexes = {int(r["id"].removeprefix("self-")) for r in output_records(output)[:3]}
    assert int(added[0]["id"].removeprefix("self-")) > max(old_indexes)


def test_openers_begin_each_self_written_turn_and_the_target_continues_them(
    chatty: Path, tmp_path: Path
) -> None:
    output = tmp_path / "openers.jsonl"
    self_prompts = {
        "count": 4, "openers": ["w4", "w7"], "min_chars": 2, "max_chars": 14, "max_new_tokens": 6,
        "max_attempts": 80,
    }  # fmt: skip
    params = generate_params(chatty, output, self_prompts=self_prompts, max_new_tokens=4, concurrency=2)
    result = generate.run(RecordingContext(work_dir=tmp_path), params)

    users = [r["messages"][0]["content"] for r in output_records(output)]
    assert len(users) == 4
    for user in users:  # the opener, then the successor chain from it: the target continued the opener
        words = user.split()
        assert words[0] in ("w4", "w7")
        assert len(words) >= 2, user  # an opener the target wrote nothing after is dropped
        assert user == answer_words(len(words), start=int(words[0][1:]))
    by_opener = result["self_prompts"]["by_opener"]
    assert set(by_opener) <= {"w4", "w7"}
    assert sum(by_opener.values()) == 4
    assert "after the opener" in result["drop_examples"]["prompt_empty"]["detail"]


def test_a_stop_request_leaves_whole_records(chatty: Path, tmp_path: Path) -> None:
    prompts = write_prompts(tmp_path / "p.jsonl", [{"text": f"w{i} w{i + 1}"} for i in range(30)])
    output = tmp_path / "out.jsonl"
    params = generate_params(chatty, output, prompts=str(prompts), temperature=0, max_new_tokens=40)
    ctx = RecordingContext(work_dir=tmp_path)
    stage = start_stage(generate.run, ctx, params)
    stage.wait_for(lambda: output.exists() and output.read_bytes().count(b"\n") >= 2, timeout_s=120)
    stage.stop()
    assert isinstance(stage.outcome.get("error"), StageCancelled)
    text = output.read_text()
    assert text.endswith("\n")
    written = [json.loads(line) for line in text.splitlines()]
    assert 2 <= len(written) < 30
    assert all(r["messages"][1]["content"] == answer_words(40) for r in written)
    assert ctx.server_states()[-1] == "stopped"


def test_a_server_that_dies_fails_the_job_and_keeps_whole_records(chatty: Path, tmp_path: Path) -> None:
    prompts = write_prompts(tmp_path / "p.jsonl", [{"text": f"w{i} w{i + 1}"} for i in range(30)])
    output = tmp_path / "out.jsonl"
    params = generate_params(chatty, output, prompts=str(prompts), temperature=0, max_new_tokens=40)
    ctx = RecordingContext(work_dir=tmp_path)
    stage = start_stage(generate.run, ctx, params)
    stage.wait_for(lambda: output.exists() and output.read_bytes().count(b"\n") >= 2, timeout_s=120)
    _kill_servers(ctx.recording.of_type("server"))
    stage.thread.join(60)
    failure = stage.outcome.get("error")
    assert isinstance(failure, StageError), stage.outcome
    assert failure.reason == TerminationReason.SERVER_DIED
    assert "stopped answering" in failure.message
    text = output.read_text()
    assert text.endswith("\n")
    assert failure.details["written"] == len(text.splitlines()) >= 2


def test_a_killed_job_resumes_with_only_the_missing_records(chatty: Path, tmp_path: Path) -> None:
    prompts = write_prompts(
        tmp_path / "p.jsonl", [{"id": f"q{i}", "turns": [f"w{i}", "w1"]} for i in range(10)]
    )
    output = tmp_path / "out.jsonl"
    values = {"prompts": str(prompts), "temperature": 0, "max_new_tokens": 30, "multi_turn": False}

    def three_written(_line: str) -> bool:
        return output.exists() and output.read_bytes().count(b"\n") >= 3

    killed = run_stage_process(
        "generate", generate_params(chatty, output, **values), tmp_path, kill_when=three_written
    )
    assert killed.result.exit_code == -signal.SIGKILL
    _kill_servers(killed.of_type("server"))
    kept = output.read_bytes()
    kept_ids = {json.loads(line)["id"] for line in kept.splitlines()}
    assert 3 <= len(kept_ids) < 10
    tail = b'{"id": "q9", "messages": [{"role": "us'  # what a kill inside a write leaves
    output.write_bytes(kept + tail)

    ctx = RecordingContext(work_dir=tmp_path)
    result = generate.run(ctx, generate_params(chatty, output, **values))
    assert output.read_bytes().startswith(kept)
    records = output_records(output)
    assert sorted(r["id"] for r in records) == sorted(f"q{i}" for i in range(10))
    assert result["resumed"] == {"kept": len(kept_ids), "discarded_partial_bytes": len(tail)}
    assert result["output_records"] == 10
    assert result["records"]["skipped_done"] == len(kept_ids)
    assert result["records"]["written"] == result["records"]["truncated"] == 10 - len(kept_ids)
    asked = received(ctx.lines)
    assert len(asked) == 10 - len(kept_ids)  # one request per missing record: first turns only
    assert all(r["sampling_seed"] is None for r in asked)  # greedy
    for record in records:
        assert [m["role"] for m in record["messages"]] == ["user", "assistant"]
        assert record["messages"][1]["content"] == answer_words(30)  # greedy: the successor chain, cut
        assert record["generation"] == {
            "source": "prompts",
            "finish": ["length"],
            "completion_tokens": [30],
            "truncated": True,
        }


def test_truncated_answers_are_kept_and_counted_or_dropped_with_their_reason(
    chatty: Path, tmp_path: Path
) -> None:
    """Seeds are per record and turn, so both runs sample the same answers: what one run counts truncated
    is exactly what the other drops."""
    prompts = write_prompts(tmp_path / "p.jsonl", [{"id": f"q{i}", "text": f"w{i}"} for i in range(20)])
    values = {"prompts": str(prompts), "temperature": 1.0, "max_new_tokens": 3, "multi_turn": False}
    kept_out, dropped_out = tmp_path / "kept.jsonl", tmp_path / "dropped.jsonl"
    kept = generate.run(RecordingContext(work_dir=tmp_path), generate_params(chatty, kept_out, **values))
    dropped = generate.run(
        RecordingContext(work_dir=tmp_path),
        generate_params(chatty, dropped_out, truncated_answers="drop", **values),
    )
    truncated_ids = {r["id"] for r in output_records(kept_out) if r["generation"]["truncated"]}
    assert kept["records"]["written"] == 20
    assert 0 < kept["records"]["truncated"] == len(truncated_ids) < 20, "a mix, or the test proves nothing"
    assert dropped["dropped"] == {"answer_truncated": len(truncated_ids)}
    assert "hit max_new_tokens (3)" in dropped["drop_examples"]["answer_truncated"]["detail"]
    written = output_records(dropped_out)
    assert {r["id"] for r in written} == {r["id"] for r in output_records(kept_out)} - truncated_ids
    assert dropped["records"]["truncated"] == 0
    assert all(r["generation"]["finish"] == ["stop"] for r in written)


def _kill_servers(server_events: list[dict[str, object]]) -> None:
    """End the servers these events name, by their process group (a server runs in its own): the one a
    SIGKILLed stage could not stop, or one the test kills under a running stage."""
    pids = {e["pid"] for e in server_events if isinstance(e.get("pid"), int)}
    for pid in pids:
        try:
            os.killpg(int(pid), signal.SIGKILL)  # type: ignore[call-overload]
        except ProcessLookupError:
            pass


def test_what_cannot_work_fails_before_any_server_starts(chatty: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    shutil.copytree(chatty, bare)
    (bare / "chat_template.jinja").unlink()
    prompts = write_prompts(tmp_path / "p.jsonl", [{"text": "w1"}])
    ctx = RecordingContext(work_dir=tmp_path)
    with pytest.raises(StageError) as no_template:
        generate.run(ctx, generate_params(bare, tmp_path / "a.jsonl", prompts=str(prompts)))
    assert no_template.value.reason == TerminationReason.BAD_INPUT
    assert "no chat template" in no_template.value.message

    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"text": "not written by generate"}\n')
    with pytest.raises(StageError) as mismatch:
        generate.run(ctx, generate_params(chatty, foreign, prompts=str(prompts)))
    assert mismatch.value.reason == TerminationReason.DATA_MISMATCH
    assert isinstance(mismatch.value.__cause__, OutputMismatch)

    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UserFileError, match="FIFO"):
        generate.run(ctx, generate_params(chatty, tmp_path / "b.jsonl", prompts=str(fifo)))
    assert ctx.server_states() == []
