"""bench/gpu/carried.py: a GPU run's generated conversations saved to OUT in parts, carried back whole, and a
pipeline spec that starts from them (no generate step), as the API validates and plans it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

import carried
from real_model import pipeline_spec

from app.pipelines.schemas import Eagle3PipelineCreate
from app.pipelines.templates import eagle3_plan


def conversations(path: Path, count: int) -> Path:
    rows = [
        {"id": str(i), "messages": [{"role": "user", "content": f"q{i} " * 40},
                                    {"role": "assistant", "content": f"answer {i} " * 300}]}
        for i in range(count)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pipeline(tmp: Path, generate_state: str, held_out_state: str) -> dict[str, object]:
    return {
        "jobs": [
            {"pipeline_step": "generate", "kind": "generate", "state": generate_state,
             "result": {"output": str(conversations(tmp / "c.jsonl", 300))}},
            {"pipeline_step": "generate_held_out", "kind": "generate", "state": held_out_state,
             "result": {"output": str(conversations(tmp / "h.jsonl", 7))}},
            {"pipeline_step": "extract", "kind": "extract", "state": "pending", "result": None},
        ]
    }  # fmt: skip


def test_generated_conversations_leave_in_parts_and_come_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(carried, "PART_BYTES", 4096)  # the device's 16 MiB limit, scaled to a small file
    out = tmp_path / "out"
    saver = carried.GeneratedSaver(out)
    saver(pipeline(tmp_path, "succeeded", "running"))
    assert not out.exists()  # the held-out answers are not done yet: nothing half saved
    saver(pipeline(tmp_path, "succeeded", "succeeded"))
    parts = sorted(p.name for p in out.iterdir())
    assert len([p for p in parts if p.startswith("conversations.jsonl.gz.part")]) >= 2
    assert "held_out.jsonl.gz.part0" in parts
    assert all((out / p).stat().st_size <= 4096 for p in parts)
    training, held_out = carried.unpack(out, tmp_path / "work")
    assert training.read_bytes() == (tmp_path / "c.jsonl").read_bytes()
    assert held_out.read_bytes() == (tmp_path / "h.jsonl").read_bytes()
    assert training.parent == tmp_path / "work" / "carried"  # inside the host's allowed root
    (out / "conversations.jsonl.gz.part1").unlink()  # a part left behind: refused, not a short file
    with pytest.raises(Exception, match="CRC|Compressed|end-of-stream|invalid"):
        carried.unpack(out, tmp_path / "again")
    with pytest.raises(SystemExit, match="no conversations.jsonl.gz.part"):
        carried.unpack(tmp_path / "work", tmp_path / "empty")


def test_a_carried_spec_is_the_gpu_recipe_on_data_with_answered_held_out_conversations(
    tmp_path: Path,
) -> None:
    spec = pipeline_spec(
        tmp_path, tmp_path / "mtbench_eval.jsonl", 16000, 10, held_out=tmp_path / "q.jsonl", eval_step=False
    )  # as `start --no-eval` posts it
    training, held_out = tmp_path / "carried" / "conversations.jsonl", tmp_path / "carried" / "held_out.jsonl"
    body = carried.carried_spec(spec, training, held_out, answer_tokens=384)
    assert "generate" not in body
    assert {k: v for k, v in body.items() if k not in ("data", "held_out")} == {
        k: v for k, v in spec.items() if k not in ("generate", "held_out")
    }
    plan = {step.step: step for step in eagle3_plan(Eagle3PipelineCreate(**body), str(tmp_path / "runs/p"))}
    assert list(plan) == ["extract", "extract_held_out", "train", "fix_keys", "gpu_check", "serve_held_out",
                          "benchmark"]  # fmt: skip
    assert (plan["extract"].params["data"], plan["extract_held_out"].params["data"]) == (
        str(training),
        str(held_out),
    )
    served = plan["serve_held_out"].params
    assert (served["prompts"], served["max_new_tokens"], served["ignore_eos"]) == (str(held_out), 384, False)
    assert plan["train"].params["held_out_data"] == plan["extract_held_out"].params["output"]
