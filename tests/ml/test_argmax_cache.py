"""The target's argmax kept per training sample after its first step (drafting/ml/argmax_cache.py): what a
later epoch reads back is what the full-vocab head computes, for packed and unpacked rows in any order;
training with it is training without it; its byte budget holds; validation never reads it.

Tiny drafter and head from a config, testsupport/tiny_trainer.py's (vocab 6, draft vocab 4).
"""

from __future__ import annotations

import torch

from drafting.ml.argmax_cache import ArgmaxCache
from drafting.ml.train_data import Batch, Collate
from drafting.ml.trainer import Trainer
from testsupport.tiny_trainer import random_sample, tiny_trainer

LENGTHS = {0: 9, 1: 6, 2: 11, 3: 7}  # dataset row -> tokens


def _item(row: int) -> dict[str, torch.Tensor]:
    """What HiddenStateDataset gives for dataset row `row` (the same tokens and states every epoch)."""
    return {**random_sample(LENGTHS[row], seed=row), "rows": torch.tensor([row])}


def _packed(*rows: tuple[int, ...], pad: int = 32) -> Batch:
    items = []
    for pack in rows:
        samples = [_item(row) for row in pack]
        item = {key: torch.cat([s[key] for s in samples]) for key in samples[0]}
        item["sample_lengths"] = torch.tensor([LENGTHS[row] for row in pack])
        items.append(item)
    return Collate(pad_multiple=pad)(items)


def _unpacked(*rows: int) -> Batch:
    return Collate()([_item(row) for row in rows])


def _full_argmax(trainer: Trainer, batch: Batch) -> torch.Tensor:
    return trainer.head.distribution(batch.hidden[:, :, 3], trainer.draft_ids)[1]


def _real(batch: Batch) -> torch.Tensor:
    return torch.arange(batch.input_ids.shape[1])[None] < batch.lengths[:, None]


def test_collate_names_each_rows_samples() -> None:
    assert _packed((0, 1), (2,)).samples == (((0, 9), (1, 6)), ((2, 11),))
    assert _unpacked(3, 1).samples == (((3, 7),), ((1, 6),))
    assert Collate()([random_sample(5, seed=0)]).samples is None  # no row numbers: nothing to key a cache by


def test_a_kept_argmax_is_the_full_heads_in_any_later_arrangement() -> None:
    trainer, cache = tiny_trainer("dense"), ArgmaxCache()
    first = _packed((0, 1, 2), (3,))
    cache.store(first, _full_argmax(trainer, first))
    assert len(cache) == 4
    for later in (_packed((2, 0), (1, 3)), _unpacked(1, 2, 0), _unpacked(3)):
        kept = cache.lookup(later)
        assert kept is not None
        assert kept.shape == later.input_ids.shape
        real = _real(later)
        assert torch.equal(kept[real], _full_argmax(trainer, later)[real])
        assert not kept[~real].any()  # past a row's samples: 0, as the padded tokens
    assert (cache.hits, cache.misses) == (3, 0)


def test_a_batch_with_one_sample_not_kept_runs_the_full_head() -> None:
    trainer, cache = tiny_trainer("dense"), ArgmaxCache()
    first = _unpacked(0, 1)
    cache.store(first, _full_argmax(trainer, first))
    assert cache.lookup(_packed((0, 2))) is None
    assert cache.lookup(Collate()([random_sample(5, seed=0)])) is None  # no row numbers: not counted
    assert (cache.hits, cache.misses) == (0, 1)


def test_the_byte_budget_bounds_what_is_kept() -> None:
    trainer = tiny_trainer("dense")
    cache = ArgmaxCache(budget_bytes=4 * (LENGTHS[0] + LENGTHS[1]))  # int32: 4 bytes a token
    batch = _unpacked(0, 1, 2)
    cache.store(batch, _full_argmax(trainer, batch))
    assert len(cache) == 2
    assert cache.lookup(_unpacked(1, 0)) is not None
    assert cache.lookup(_unpacked(2)) is None


def test_the_draft_rows_head_gives_the_full_heads_probabilities() -> None:
    trainer = tiny_trainer("dense")
    batch = _packed((0, 1, 2), (3,))
    last = batch.hidden[:, :, 3]
    probs, _ = trainer.head.distribution(last, trainer.draft_ids)
    torch.testing.assert_close(trainer.head.draft_distribution(last, trainer.draft_rows), probs)


def _two_epochs(trainer: Trainer) -> list[tuple[float, torch.Tensor]]:
    """Each step's loss and statistics (accuracy and the in-draft counts read the argmax, the loss not)."""
    epoch = [_packed((0, 1), (2,)), _packed((3, 2), (1,)), _unpacked(0, 3)]
    steps = [trainer.step(batch, step) for step, batch in enumerate(epoch * 2)]
    return [(loss, stats) for loss, _, stats in steps]


def test_training_with_the_cache_is_training_without_it() -> None:
    cached, uncached = tiny_trainer("dense"), tiny_trainer("dense")
    uncached.argmax_cache = ArgmaxCache(budget_bytes=0)
    losses = _two_epochs(cached)
    torch.testing.assert_close(losses, _two_epochs(uncached))
    for mine, theirs in zip(cached.drafter.parameters(), uncached.drafter.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)
    # the first epoch's third batch holds rows 0 and 3, both kept by then: 4 of 6 steps skip the full head
    assert (cached.argmax_cache.hits, cached.argmax_cache.misses) == (4, 2)
    assert (uncached.argmax_cache.hits, len(uncached.argmax_cache)) == (0, 0)


def test_validation_never_reads_the_training_samples_argmax() -> None:
    """A held-out extraction numbers its rows from 0 too: its row 0 is not the training row 0."""
    poisoned, fresh = tiny_trainer("dense"), tiny_trainer("dense")
    train_batch = _unpacked(0, 1)
    poisoned.argmax_cache.store(train_batch, torch.full_like(train_batch.input_ids, 5))
    held_out = _unpacked(0, 1)
    assert torch.equal(poisoned.evaluate([held_out]), fresh.evaluate([held_out]))
    assert poisoned.argmax_cache.hits == 0
