"""The simulated acceptance: serving replayed cycle by cycle on teacher-forced chains, against hand-counted
decodes, against the per-position estimate where drafts fail in clusters, and against eyas's own
free-running speculative decoder on the same text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from drafting.ml.capture import capture_hidden_states, extraction_indices, num_decoder_layers
from drafting.ml.drafter import Eagle3Drafter, load_drafter
from drafting.ml.simulated_acceptance import accept_lengths, walk, walk_row
from drafting.ml.target_head import TargetHead, load_target_head
from drafting.ml.train_data import Batch
from drafting.ml.trainer import OptimSettings, Trainer, make_optimizer
from drafting.serving.engine.decoding import DecodeLimits, speculative_decode
from testsupport.tiny_pair import make_pair


def _row(chains: list[int], counted: list[int], before: list[int], depth: int) -> tuple[int, int]:
    return walk_row(np.array(chains), np.array(counted), np.array(before), depth)


def test_a_draft_always_right_accepts_depth_plus_one_per_cycle() -> None:
    # An answer of 13 tokens t_1..t_13 in a row: base positions j = 0..11 are counted (t_{j+2} assistant),
    # t_{j+1} is an assistant token for all of them. Every chain is right as far as the answer goes.
    n = 12
    chains = [min(7, n - j) for j in range(n)]
    counted, before = [1] * n, [1] * n
    # depth 3: the prefill gives t_1; cycles at j = 0, 4, 8 accept 3 drafts + bonus (4 tokens each).
    assert _row(chains, counted, before, 3) == (13, 3)
    # depth 5: cycles at j = 0 (6 tokens), j = 6 (6 tokens): t_1 + 12 = 13 tokens in 2 cycles.
    assert _row(chains, counted, before, 5) == (13, 2)


def test_a_cycle_starts_where_the_last_one_ended_and_never_runs_past_the_answer() -> None:
    # Positions 0-1 are a prompt (t_1, t_2 not assistant), the answer is t_2..t_8 (j = 0..6 counted, but
    # t_{j+1} is an assistant token only from j = 1), then a user turn.
    chains = [0, 2, 0, 0, 3, 2, 1, 0, 0]
    counted = [1, 1, 1, 1, 1, 1, 1, 0, 0]
    before = [0, 1, 1, 1, 1, 1, 1, 1, 0]
    # j = 1: 2 drafts + bonus -> t_3..t_5, next j = 4: 3 drafts but only 3 answer tokens left (t_6..t_8)
    # -> 3 tokens; answer done. Tokens: the first t_2, then 3 + 3 = 7 in 2 cycles.
    assert _row(chains, counted, before, 5) == (7, 2)
    # depth 1: j = 1 -> 2 tokens, j = 3 -> 1 token (0 right), j = 4 -> 2, j = 6 -> 1: 1 + 6 = 7 in 4 cycles.
    assert _row(chains, counted, before, 1) == (7, 4)


def test_clustered_misses_make_serving_worse_than_the_per_position_average() -> None:
    # 20 easy answer positions (every draft right) then 20 hard ones (none right). Per position, half of
    # the first drafts are right; a decoder crosses the easy stretch in a few long cycles and then
    # spends one cycle per hard token.
    easy, hard = 20, 20
    chains = [min(5, easy - j) if j < easy else 0 for j in range(easy + hard)]
    ones = [1] * (easy + hard)
    tokens, cycles = _row(chains, ones, ones, 5)
    # easy: j = 0, 6, 12 (6 tokens each), j = 18 (2 drafts right + the bonus, 3 tokens) -> 4 cycles;
    # hard: j = 21..39, one token each -> 19 cycles. The prefill's t_1 and 18 + 3 + 19 tokens.
    assert (tokens, cycles) == (1 + 18 + 3 + 19, 23)
    per_position = 1 + sum(np.mean([c > k for c in chains]) for k in range(5))
    assert tokens / cycles < 0.6 * per_position  # 1.78 against 3.25


def test_packed_samples_are_walked_apart_and_summed_over_rows() -> None:
    # Two samples packed in one row: the first's answer ends at j = 2 (counted stops), the second's begins
    # at j = 5. A row of its own repeats the second sample; the batch sums tokens and cycles.
    chains = [[3, 2, 1, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1, 0, 0]]
    counted = [[1, 1, 1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1]]
    before = [[1, 1, 1, 1, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1]]
    inputs = torch.tensor([chains, counted, before])
    sums = walk(inputs, [3])
    # row 0: j = 0 takes all 3 answer tokens (t_1 + 3); j = 5: 1 right + bonus (2), j = 7: 1 -> 1 + 3.
    # row 1: the same second sample: 1 + 3 in 2 cycles.
    assert sums.tolist() == [[4 + 4 + 4], [1 + 2 + 2]]
    assert accept_lengths(sums, [3]) == {3: 12 / 5}


@pytest.mark.parametrize("depth", [2, 4])
def test_the_walk_takes_the_cycles_eyas_speculative_decoder_takes_on_the_same_text(
    tmp_path: Path, depth: int
) -> None:
    """The simulation is the decode: on a target's own greedy text, teacher-forced TTT chains walked cycle
    by cycle give the tokens and verify steps of free-running speculative decoding (eval's decoder, which
    matched SGLang within 2 % on the H200), not the per-position average."""
    new_tokens = 40
    pair = make_pair(tmp_path, fit_steps=30, prompts=3)  # a fitted drafter: drafts get accepted, runs vary
    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    drafter = load_drafter(
        pair.draft,
        target_embed=target.get_input_embeddings().weight.detach(),
        device="cpu",
        dtype=torch.float32,
    )
    trainer = _validator(drafter, load_target_head(pair.target), depth)
    indices = extraction_indices(drafter.aux_layers, num_decoder_layers(target))
    decoded = tokens = cycles = 0
    for prompt in pair.prompts:
        result = speculative_decode(target, drafter, prompt, DecodeLimits(new_tokens), depth)
        ids = torch.tensor([prompt + result.output_ids])
        with torch.no_grad():
            hidden = capture_hidden_states(target, ids, indices)
        loss_mask = torch.zeros_like(ids, dtype=torch.bool)
        loss_mask[:, len(prompt) :] = True  # the decoded tokens are the answer
        batch = Batch(ids, loss_mask, hidden, torch.tensor([ids.shape[1]]))
        _, walked = trainer.validate([batch], [depth])
        assert walked[:, 0].tolist() == [len(result.output_ids), result.verify_ct]
        decoded += sum(result.accepted_drafts)
        tokens, cycles = tokens + len(result.output_ids), cycles + result.verify_ct
    assert decoded > 0  # accepted drafts were compared, not only rejections
    assert 1.0 < tokens / cycles < depth + 1


def _validator(drafter: Eagle3Drafter, head: TargetHead, depth: int) -> Trainer:
    settings = OptimSettings(
        lr=0.0, warmup_steps=0, total_steps=1, schedule="constant", weight_decay=0.0, grad_clip=1.0
    )
    optimizer, scheduler = make_optimizer(drafter, settings, torch.device("cpu"))
    return Trainer(
        drafter, head, optimizer=optimizer, scheduler=scheduler, settings=settings, ttt_steps=depth,
        step_decay=0.8, attention="dense", compute_dtype=torch.float32, device=torch.device("cpu"),
    )  # fmt: skip
