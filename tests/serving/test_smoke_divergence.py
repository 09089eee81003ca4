"""The divergence classifier: a planted near-tie passes as one, a planted lossy verify fails as a real loss.

Both run real torch decoding on constructed successor targets (cli.demo.constructed); the near-tie and the
lossy verify (every draft accepted without checking it) are planted by tests.serving.planted, not mocked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from cli.demo.constructed import SPECIALS, successor
from drafting.serving.engine.decoding import DecodeLimits, greedy_decode, speculative_decode
from drafting.serving.evaluation.divergence import TargetScorer, classify, first_divergence, near_tie_bound
from drafting.serving.evaluation.smoke import Answer, SmokeOptions, judge
from tests.serving import planted
from tests.serving.planted import PLANTED_MARGIN, RIVAL, THIRD, TIED, random_drafter


@pytest.fixture(scope="module")
def near_tie_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The successor target with a second token RIVAL PLANTED_MARGIN logits below the successor after TIED."""
    return planted.near_tie_target(tmp_path_factory.mktemp("tie") / "target")


def _next_logits(model: torch.nn.Module, token: int) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([[token]])).logits[0, -1]


def test_the_planted_target_has_its_near_tie_and_clear_margins_elsewhere(near_tie_target: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(near_tie_target, dtype=torch.float32)
    tied = _next_logits(model, TIED)
    values, indices = tied.topk(2)
    assert indices.tolist() == [successor(TIED), RIVAL]
    assert float(values[0] - values[1]) == pytest.approx(PLANTED_MARGIN, abs=1e-3)
    clear = _next_logits(model, TIED + 1).topk(2).values
    assert float(clear[0] - clear[1]) > near_tie_bound(float(clear[0]))


def test_a_flip_at_the_planted_near_tie_is_a_near_tie(near_tie_target: Path) -> None:
    prompt = [TIED - 3]
    baseline = [TIED - 2, TIED - 1, TIED, successor(TIED), successor(TIED) + 1]
    flipped = baseline[:3] + [RIVAL, successor(RIVAL), successor(RIVAL) + 1]  # the rival, then its successors
    verdict = classify(0, prompt, baseline, flipped, TargetScorer(near_tie_target, device="cpu"))
    assert verdict.verdict == "near_tie", verdict
    assert verdict.position == 3
    assert verdict.top_two == (successor(TIED), RIVAL)
    assert verdict.margin is not None
    assert verdict.margin < verdict.bound


def test_a_token_outside_the_top_two_or_a_clear_margin_is_a_real_loss(near_tie_target: Path) -> None:
    scorer = TargetScorer(near_tie_target, device="cpu")
    prompt = [TIED - 3]
    baseline = [TIED - 2, TIED - 1, TIED, successor(TIED)]
    outside = [*baseline[:3], RIVAL + 1]
    assert classify(0, prompt, baseline, outside, scorer).verdict == "real_loss"
    second_best_where_clear = [*baseline[:1], RIVAL]
    verdict = classify(1, prompt, baseline, second_best_where_clear, scorer)
    assert verdict.verdict == "real_loss"
    assert "over the near-tie bound" in verdict.note
    assert verdict.gaps is not None
    assert verdict.bound is not None
    assert verdict.gaps[1] > verdict.bound
    assert first_divergence(baseline, baseline) is None
    assert classify(2, prompt, baseline, baseline, scorer).verdict == "identical"


def test_two_engines_picking_different_runners_up_of_a_three_way_tie_is_a_near_tie(tmp_path: Path) -> None:
    """Seen on the H200: the float32 argmax was neither engine's token; the baseline took the second, the
    speculative server the third, all three within 0.003 logits. A top-two rule called that a real loss."""
    target = planted.three_way_tie_target(tmp_path / "target")
    scorer = TargetScorer(target, device="cpu")
    prompt = [TIED - 3]
    baseline = [TIED - 2, TIED - 1, TIED, RIVAL, successor(RIVAL)]
    candidate = [*baseline[:3], THIRD, successor(THIRD)]
    verdict = classify(0, prompt, baseline, candidate, scorer)
    assert verdict.verdict == "near_tie", verdict
    assert verdict.top_two == (successor(TIED), RIVAL)
    assert THIRD not in verdict.top_two  # the candidate's token is third, and still tied
    assert verdict.gaps is not None
    assert verdict.bound is not None
    assert verdict.gaps[0] == pytest.approx(PLANTED_MARGIN, abs=1e-3)
    assert verdict.gaps[1] == pytest.approx(planted.PLANTED_MARGIN_THIRD, abs=1e-3)
    # a token just as far down the ranking but clearly below the top is still a real loss
    clear = [*baseline[:3], successor(THIRD)]
    lost = classify(1, prompt, baseline, clear, scorer)
    assert lost.verdict == "real_loss", lost
    assert lost.gaps is not None
    assert lost.bound is not None
    assert lost.gaps[1] > lost.bound


def test_a_lossy_verify_is_caught_as_a_real_loss_by_the_smoke_judge(
    near_tie_target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted fault: verification keeps every draft (no comparison with the target's choice). A random
    draft then puts tokens the target would not choose into the output; acceptance looks great, the judge
    fails it."""
    target = AutoModelForCausalLM.from_pretrained(near_tie_target, dtype=torch.float32).eval()
    drafter = random_drafter(target.config.to_dict(), target.get_input_embeddings().weight.detach()).eval()
    prompts = [[len(SPECIALS) + i, len(SPECIALS) + i + 1] for i in range(3)]
    limits = DecodeLimits(16)
    baseline = [greedy_decode(target, p, limits).output_ids for p in prompts]
    planted.plant("lossy", monkeypatch.setattr)
    lossy = [speculative_decode(target, drafter, p, limits, 3) for p in prompts]
    answers = [Answer(r.output_ids, len(r.output_ids), r.verify_ct, r.accept_length) for r in lossy]
    scorer = TargetScorer(near_tie_target, device="cpu")
    report = judge(answers, prompts, baseline, scorer, SmokeOptions())
    assert report.accept_length is not None
    assert report.accept_length > 3.0
    assert report.verdict == "outputs_diverged", report.as_dict()
    assert report.as_dict()["real_losses"] == 3
    assert report.as_dict()["termination_reason"] == "RELEASE_GATE_FAILED"


def test_an_honest_verify_with_the_same_draft_passes_the_judge(near_tie_target: Path) -> None:
    target = AutoModelForCausalLM.from_pretrained(near_tie_target, dtype=torch.float32).eval()
    drafter = random_drafter(target.config.to_dict(), target.get_input_embeddings().weight.detach())
    prompts = [[len(SPECIALS) + i] for i in range(2)]
    baseline = [greedy_decode(target, p, DecodeLimits(12)).output_ids for p in prompts]
    honest = [speculative_decode(target, drafter.eval(), p, DecodeLimits(12), 3) for p in prompts]
    answers = [Answer(r.output_ids, len(r.output_ids), r.verify_ct, r.accept_length) for r in honest]
    options = SmokeOptions(min_accept_length=1.0)  # a random draft: judged here for its outputs only
    report = judge(answers, prompts, baseline, TargetScorer(near_tie_target, device="cpu"), options)
    assert [a.output_ids for a in answers] == baseline
    assert report.verdict == "passed", report.as_dict()
    assert all(d.verdict == "identical" for d in report.divergences)


def test_the_scorer_computes_the_last_positions_logits_alone(near_tie_target: Path) -> None:
    """It asks the target for the last position's logits only (`logits_to_keep`): the row it reads, the same
    as a full forward's last row."""
    prefix = [TIED - 3, TIED - 2, TIED - 1, TIED]
    scorer = TargetScorer(near_tie_target, device="cpu")
    scored = scorer.next_logits(prefix)
    assert scorer._last_only == {"logits_to_keep": 1}
    model = AutoModelForCausalLM.from_pretrained(near_tie_target, dtype=torch.float32)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([prefix])).logits[0, -1]
    torch.testing.assert_close(scored, full, rtol=1e-5, atol=1e-4)
