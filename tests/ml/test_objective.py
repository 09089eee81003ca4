"""The TTT objective's alignment and statistics, on hand-built predictions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from drafting.ml.drafter import Eagle3Drafter
from drafting.ml.objective import Targets, soft_cross_entropy, summarise, ttt_objective
from drafting.ml.simulated_acceptance import accept_lengths, walk

VOCAB = 8


def _identity_drafter() -> Eagle3Drafter:
    """lm_head = identity over a draft vocab equal to the target vocab: the argmax of a step output is its
    predicted token, so the test decides exactly which predictions are right."""
    config = {
        "hidden_size": VOCAB, "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 2,
        "vocab_size": VOCAB, "draft_vocab_size": VOCAB, "rms_norm_eps": 1e-6,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]},
    }  # fmt: skip
    drafter = Eagle3Drafter(config)
    with torch.no_grad():
        drafter.lm_head.weight.copy_(torch.eye(VOCAB))
    return drafter


def _predicting(tokens: list[int]) -> torch.Tensor:
    return F.one_hot(torch.tensor(tokens), VOCAB).float()[None] * 10


def test_step_k_at_position_j_is_scored_against_the_target_at_j_plus_1_plus_k() -> None:
    target_argmax = torch.tensor([[5, 1, 2, 3, 4, 6]])
    # Step 0 at j predicts argmax[j+1] = 1, 2, 3, 4 (j = 0..3): right except j = 2.
    step0 = _predicting([1, 2, 7, 4, 0, 0])
    # Step 1 at j predicts argmax[j+2] = 2, 3, 4 (j = 0..2): right at j = 0 and 2.
    step1 = _predicting([2, 7, 4, 0, 0, 0])
    targets = Targets(
        probs=F.one_hot(target_argmax, VOCAB).float(),
        argmax=target_argmax,
        in_draft=torch.ones(1, 6, dtype=torch.bool),
        loss_mask=torch.tensor(
            [[0, 0, 0, 1, 1, 1]], dtype=torch.bool
        ),  # token j+2+k must be an assistant token
    )
    loss, stats = ttt_objective(_identity_drafter(), [step0, step1], targets, [1.0, 0.8], with_walk=True)
    _loss_sum, loss_count, correct, chain, count = stats.stacked().tolist()
    assert count == [3, 3]  # step 0 counts j = 1..3 (token 2 is not masked in), step 1 counts j = 0..2
    assert correct == [2, 2]  # step 0: j = 1, 3; step 1: j = 0, 2
    assert chain == [2, 1]  # both steps right only at j = 0
    assert loss_count == count
    metrics = summarise(stats.stacked(), [1.0, 0.8])
    assert metrics["est_accept_len"] == 1 + 2 / 3 + 1 / 3
    assert metrics["acc_1"] == 2 / 3
    assert loss.item() > 0
    # What the simulated acceptance walks. j = 0's step 0 is right but not counted (t_2 is not an
    # assistant token): no chain starts there.
    assert stats.walk is not None
    chains, counted, before = stats.walk[:, 0].tolist()
    assert (chains, counted, before) == ([0, 1, 0, 1], [0, 1, 1, 1], [0, 0, 1, 1])
    # The answer t_3..t_5: the decode starts at j = 2 (t_3 from the prefill), step 0 wrong -> bonus t_4;
    # j = 3: step 0 right (t_5) and the answer ends: 3 tokens in 2 cycles, where the per-position figure
    # above says 2.
    assert accept_lengths(walk(stats.walk, [2]), [2]) == {2: 3 / 2}
    _, training = ttt_objective(_identity_drafter(), [step0, step1], targets, [1.0, 0.8])
    assert training.walk is None  # a training step does not pay for the walk


def test_soft_cross_entropy_is_cross_entropy_with_probability_targets() -> None:
    torch.manual_seed(0)
    logits, probs = torch.randn(5, 11), torch.randn(5, 11).softmax(-1)
    expected = F.cross_entropy(logits, probs, reduction="none")
    torch.testing.assert_close(soft_cross_entropy(logits, probs), expected)
