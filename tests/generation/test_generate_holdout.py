"""Held-out evaluation prompts stay out of the training data generate writes: a prompt record or a
self-written user turn equal to a held-out user turn (case, punctuation and spacing folded) is dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.reasons import TerminationReason
from drafting.context import StageError
from drafting.generation.holdout import load_holdout
from drafting.stages import generate
from tests.generation.conftest import generate_params, output_records, write_prompts
from tests.serving.conftest import RecordingContext


def test_held_out_prompts_and_self_prompts_are_dropped(chatty: Path, tmp_path: Path) -> None:
    held = write_prompts(tmp_path / "eval.jsonl", [{"turns": ["W3!", "w9"]}, {"text": "w0   w1"}])
    prompts = write_prompts(
        tmp_path / "train.jsonl",
        [
            {"id": "kept", "text": "w5 w6"},
            {"id": "eval-copy", "messages": [{"role": "user", "content": "w3"}]},
        ],
    )
    output = tmp_path / "out.jsonl"
    # Only "w0" and "w0 w1 w2" may be kept (2..8 characters, "w0 w1" is held out), so asking for three
    # spends every attempt, and "w0 w1" (p 0.21 an attempt) is sampled and dropped with near certainty.
    self_prompts = {"count": 3, "min_chars": 2, "max_chars": 8, "max_new_tokens": 6, "max_attempts": 60}
    params = generate_params(
        chatty,
        output,
        prompts=str(prompts),
        self_prompts=self_prompts,
        holdout_prompts=[str(held)],
        max_new_tokens=6,
        concurrency=2,
    )
    result = generate.run(RecordingContext(work_dir=tmp_path), params)

    users = [r["messages"][0]["content"] for r in output_records(output)]
    assert "w3" not in users
    assert "w0 w1" not in users
    assert "w5 w6" in users
    assert sorted(u for u in users if u.startswith("w0")) == ["w0", "w0 w1 w2"]
    assert result["dropped"]["overlaps_holdout"] >= 2  # the copied record and the self-written "w0 w1"
    assert "held-out" in result["drop_examples"]["overlaps_holdout"]["detail"]


def test_the_named_evaluation_set_is_read_whole() -> None:
    mtbench = load_holdout(["mtbench"])
    assert len(mtbench.turns) >= 150  # 80 questions, two turns each (a few second turns repeat)


def test_an_unreadable_held_out_set_fails_before_any_server(chatty: Path, tmp_path: Path) -> None:
    bad = write_prompts(tmp_path / "bad.jsonl", ["not json"])
    params = generate_params(
        chatty, tmp_path / "out.jsonl", self_prompts={"count": 1}, holdout_prompts=[str(bad)]
    )
    ctx = RecordingContext(work_dir=tmp_path)
    with pytest.raises(StageError) as failed:
        generate.run(ctx, params)
    assert failed.value.reason == TerminationReason.BAD_INPUT
    assert "holdout_prompts" in str(failed.value)
    assert ctx.server_states() == []
    assert not (tmp_path / "out.jsonl").exists()


def test_generate_runs_from_inside_a_running_event_loop(chatty: Path, tmp_path: Path) -> None:
    """An async caller (or a test tool keeping a loop running in the main thread, as playwright's sync API
    does) must not break generation: it runs its own loop on a thread of its own then."""
    import asyncio

    output = tmp_path / "out.jsonl"
    params = generate_params(chatty, output, self_prompts={"count": 1, "min_chars": 2}, max_new_tokens=4)

    async def caller() -> dict[str, object]:
        return generate.run(RecordingContext(work_dir=tmp_path), params)

    result = asyncio.run(caller())
    assert result["self_prompts"]["written"] == 1  # type: ignore[index]
    assert len(output_records(output)) == 1
