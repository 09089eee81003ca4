"""eval's output check: a divergent speculative output is judged by the target at its first divergent
position, and only a real loss fails it.

Real torch decoding on the constructed successor target (cli.demo.constructed) with a planted near-tie (the
target's top two logits 0.1 apart after TIED). The two faults are planted in eyas's own decoder, not mocked
(tests.serving.planted): a lossy verify keeps every draft without comparing it with the target's choice; a
rounding flip makes the verify forward pick the runner-up wherever the top two are within 0.2 logits, as a
bf16 kernel with another reduction order can.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from cli.demo.constructed import SPECIALS, successor
from contract.params.evaluate import EvalParams
from drafting.context import StageContext
from drafting.ml.drafter import save_drafter
from drafting.serving.engine.models import load_models
from drafting.serving.evaluation.offline import evaluate_acceptance
from drafting.serving.prompts import Prompt
from drafting.stages import evaluate
from tests.serving import planted
from tests.serving.planted import PLANTED_MARGIN, RIVAL, TIED, random_drafter


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The successor target with RIVAL 0.1 logits under the successor after TIED, and a random drafter."""
    root = tmp_path_factory.mktemp("evaldiv")
    folder = planted.near_tie_target(root / "target")
    config = json.loads((folder / "config.json").read_text())
    save_drafter(random_drafter(config), root / "draft", target_config=config)
    return folder, root / "draft"


def _prompts() -> list[Prompt]:
    """Prompts whose greedy continuation walks through TIED (the successor chain), two categories."""
    start = len(SPECIALS)
    return [
        Prompt(input_ids=[start + 1, start + 2], category="tie"),
        Prompt(input_ids=[start + 3], category="tie"),
        Prompt(input_ids=[start + 30], category="clear"),
    ]


def _evaluate(pair: tuple[Path, Path]) -> dict[str, Any]:
    models = load_models(str(pair[0]), str(pair[1]), device=torch.device("cpu"), dtype=torch.float32)
    rows = evaluate_acceptance(
        models, _prompts(), [3], max_new_tokens=12, ignore_eos=True, check_outputs=True
    )
    return rows[0]


def test_an_honest_drafter_gives_identical_outputs(pair: tuple[Path, Path]) -> None:
    row = _evaluate(pair)
    assert row["divergence"] == {"identical": 3, "near_tie": 0, "real_loss": 0, "unscored": 0}
    assert (row["outputs_match"], row["outputs_identical"], row["divergent_prompts"]) == (True, True, [])
    assert set(row["by_category"]) == {"tie", "clear"}
    assert row["by_category"]["tie"]["prompts"] == 2
    assert row["by_category"]["tie"]["accept_length"] >= 1.0


def test_a_lossy_verify_is_caught_as_a_real_loss(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    planted.plant("lossy", monkeypatch.setattr)
    row = _evaluate(pair)
    assert row["outputs_match"] is False
    assert row["divergence"]["real_loss"] >= 1
    assert row["divergence"]["near_tie"] == 0
    losses = [d for d in row["divergent_prompts"] if d["verdict"] == "real_loss"]
    assert losses
    assert all(d["position"] is not None and d["category"] in ("tie", "clear") for d in losses)


def test_a_rounding_flip_at_the_planted_near_tie_is_a_near_tie_and_passes(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    planted.plant("flip", monkeypatch.setattr)
    row = _evaluate(pair)
    assert row["divergence"]["near_tie"] == 2  # both prompts that walk through TIED
    assert row["divergence"]["real_loss"] == 0
    assert (row["outputs_match"], row["outputs_identical"]) == (True, False)
    ties = row["divergent_prompts"]
    assert [d["prompt"] for d in ties] == [0, 1]
    for tie in ties:
        assert (tie["baseline_token"], tie["candidate_token"]) == (successor(TIED), RIVAL)
        assert tie["margin"] == pytest.approx(PLANTED_MARGIN, abs=1e-3)
        assert tie["margin"] < tie["bound"]
        assert tie["scored_in"] == "float32 on cpu"
    # prompt 0 walks start+3, start+4, TIED: it first diverges where TIED's successor is due
    assert ties[0]["position"] == TIED - (len(SPECIALS) + 2)


def test_the_eval_stage_renders_chat_prompts_and_reports_categories(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    prompts = tmp_path / "chat.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": "w1 w2 w3"}], "category": "a"},
        {"turns": ["w7 w8", "w9"], "category": "b", "question_id": 9},
        {"text": "w4 w5"},
    ]
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    params = EvalParams(
        model=str(pair[0]),
        draft=str(pair[1]),
        depths=[2],
        prompts=str(prompts),
        max_new_tokens=6,
        device="cpu",
    )
    result = evaluate.run(StageContext(work_dir=tmp_path), params)
    assert result["prompt_set"]["chat_prompts"] == 2
    assert "1 later user turn(s) were left out" in result["prompt_set"]["turns"]
    assert result["prompt_set"]["raw_text_note"].startswith("1 of 3 prompts are raw text")
    depth = result["depths"][0]
    assert depth["outputs_match"] is True
    assert set(depth["by_category"]) == {"a", "b", "(none)"}
    assert sum(c["prompts"] for c in depth["by_category"].values()) == 3
