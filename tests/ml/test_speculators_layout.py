"""An eyas extraction read back by speculators 0.9.0's own offline reader, sample for sample (issue 15).

speculators' trainer reads pre-extracted hidden states through `speculators.train.data.ArrowDataset`
(speculators/train/data.py:147-333), built by `create_train_val_loaders` (train/dataloader.py:94-183) and
packed by `CollateFn` (data.py:336-455) after the EAGLE-3 `shift_batch` (models/eagle3/data.py:8-44).
It needs:

- `<data_path>/`: an HF dataset (`load_from_disk`, data.py:164) with `input_ids`, `loss_mask` and `seq_len`
  (`seq_len` feeds the multipack sampler, data.py:225), in torch format with int64 `loss_mask` as
  speculators' preprocessing writes it (data_generation/preprocessing.py:398 and 638);
- `<data_path>/hidden_states/hs_{i}.safetensors` for row i (hs_connectors/transfer.py:141-143, the
  default path from `FileBackend.from_train_args`, transfer.py:185-194): `token_ids` [seq] (must equal the
  row's `input_ids` or the sample is dropped, data.py:314-322) and `hidden_states` [seq, 4, H]; the
  reader gives `hidden_states[:, :-1].flatten(1)` [seq, 3H] and `verifier_last_hidden_states`
  `hidden_states[:, -1]` (data.py:324-333), the latter before the verifier's final norm (the model applies
  `verifier_norm` then `verifier_lm_head`, models/eagle3/core.py:250-253);
- `<data_path>/token_freq.pt`, `{token_id: count}` (`torch.load(weights_only=True)`, train/cli.py:360-367),
  from which `build_vocab_mappings_from_distribution` makes d2t/t2d (train/vocab_mapping.py:74-106).

No index or manifest file is read; eyas's `eyas_manifest.json` is extra. Every import below is the installed
package's real code: speculators 0.9.0 and hs-connectors import without a GPU stack, so nothing is stubbed.
"""

from __future__ import annotations

import json
import random
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from contract.params.extract import ExtractParams
from drafting.context import RecordingSink, StageContext
from drafting.ml._dataset import read_dataset_rows, read_token_freq
from drafting.ml.hidden_store import read_manifest
from drafting.ml.train_data import HiddenStateDataset, open_extraction
from drafting.ml.vocab import d2t_offsets, draft_token_ids
from drafting.stages import extract
from tests.ml.speculators_offline import offline_loaders
from testsupport.tiny_targets import chat, random_target, write_jsonl

HIDDEN = 32  # testsupport.tiny_targets' target
MAX_LEN = 64


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return random_target(tmp_path_factory.mktemp("target") / "target")


def _extract(target: Path, root: Path, dtype: str) -> Path:
    """eyas's real extract stage, from its params, on 12 conversations (one longer than MAX_LEN)."""
    rng = random.Random(1)
    records: list[Any] = [chat(rng, turns=1 + i % 3, words=3 + i % 5, sharegpt=i % 2 == 1) for i in range(11)]
    records.append(chat(rng, turns=2, words=30))  # truncated to MAX_LEN
    data = write_jsonl(root / "data.jsonl", records)
    output = root / "out"
    params = ExtractParams(
        target=str(target),
        data=str(data),
        output=str(output),
        max_len=MAX_LEN,
        batch_size=3,
        dtype=dtype,
        device="cpu",
        writer_threads=2,
    )
    extract.run(StageContext(work_dir=root, sink=RecordingSink()), params)
    return output


@pytest.fixture(scope="module", params=["bfloat16", "float32"])
def extraction(
    request: pytest.FixtureRequest, target: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return _extract(target, tmp_path_factory.mktemp(request.param), request.param)


def _eyas_samples(target: Path, output: Path) -> list[dict[str, torch.Tensor]]:
    """What eyas wrote, through eyas's own training reader."""
    config = json.loads((target / "config.json").read_text())
    dataset = HiddenStateDataset(open_extraction(output, config), max_len=MAX_LEN)
    return [dataset[i] for i in range(len(dataset))]


def test_arrow_dataset_returns_every_sample_as_eyas_wrote_it(target: Path, extraction: Path) -> None:
    from speculators.train.data import ArrowDataset
    from speculators.train.recovery import SampleUnavailable

    manifest = read_manifest(extraction)
    assert manifest is not None
    dtype = getattr(torch, manifest["dtype"])
    ours = _eyas_samples(target, extraction)
    ids, masks = read_dataset_rows(extraction)

    theirs = ArrowDataset(max_len=MAX_LEN, datapath=extraction, on_missing="raise")
    assert len(theirs) == len(ours) == manifest["samples"] == 12
    assert theirs.approx_lengths == [len(row) for row in ids]  # what the multipack sampler packs by
    for i, mine in enumerate(ours):
        item = theirs[i]
        assert not isinstance(item, SampleUnavailable), f"speculators dropped sample {i}: {item}"
        seq = len(ids[i])
        assert set(item) == {
            "input_ids",
            "loss_mask",
            "hidden_states",
            "verifier_last_hidden_states",
            "lengths",
            "position_ids",
        }
        assert item["input_ids"].dtype == torch.int64
        assert item["input_ids"].tolist() == ids[i] == mine["input_ids"].tolist()
        assert item["loss_mask"].dtype == torch.int64  # as speculators' preprocessing writes it
        assert item["loss_mask"].tolist() == masks[i] == mine["loss_mask"].long().tolist()
        assert sum(masks[i]) > 0
        assert item["hidden_states"].shape == (seq, 3 * HIDDEN)
        assert item["hidden_states"].dtype == dtype
        assert torch.equal(item["hidden_states"], mine["hidden"][:, :3].flatten(1))
        for slot in range(3):  # aux states concatenated in the manifest's aux_layers order
            chunk = item["hidden_states"][:, slot * HIDDEN : (slot + 1) * HIDDEN]
            assert torch.equal(chunk, mine["hidden"][:, slot])
        assert item["verifier_last_hidden_states"].shape == (seq, HIDDEN)
        assert item["verifier_last_hidden_states"].dtype == dtype
        assert torch.equal(item["verifier_last_hidden_states"], mine["hidden"][:, 3])
        assert item["lengths"].tolist() == [seq]
        assert torch.equal(item["position_ids"], torch.arange(seq))


@torch.no_grad()
def test_the_states_speculators_reads_are_the_ones_its_model_expects(target: Path, tmp_path: Path) -> None:
    """Its default target layers are eyas's aux layers; the 4th state is the last layer before the norm."""
    from speculators.models.utils import resolve_target_layer_ids
    from speculators.train.data import ArrowDataset

    output = _extract(target, tmp_path, "float32")
    manifest = read_manifest(output)
    assert manifest is not None
    with pytest.warns(UserWarning, match="target-layer-ids is not explicitly set"):
        layers = resolve_target_layer_ids(None, str(target))  # [2, N//2, N-3], models/utils.py:109-111
    assert layers == manifest["aux_layers"]

    model = AutoModelForCausalLM.from_pretrained(target).eval()
    theirs = ArrowDataset(max_len=MAX_LEN, datapath=output, on_missing="raise")
    for i in range(len(theirs)):
        item = theirs[i]
        reference = model(input_ids=item["input_ids"][None], output_hidden_states=True).hidden_states
        aux = item["hidden_states"].unflatten(1, (3, HIDDEN))
        for slot, layer in enumerate(layers):  # HF hidden_states[l] = input of layer l = vLLM's capture id l
            torch.testing.assert_close(aux[:, slot], reference[layer][0], rtol=1e-4, atol=1e-4)
        # what core.py:250-253 feeds the verifier's lm_head: norm(verifier_last) = HF's final hidden state
        last = item["verifier_last_hidden_states"]
        torch.testing.assert_close(model.model.norm(last), reference[-1][0], rtol=1e-4, atol=1e-4)


def _segments(batch: dict[str, Any]) -> list[dict[str, torch.Tensor]]:
    """The packed rows of one collated batch, cut apart by its document ids."""
    docs = batch["document_ids"][0]
    return [
        {
            key: batch[key][0][docs == doc]
            for key in ("input_ids", "loss_mask", "hidden_states", "verifier_last_hidden_states")
        }
        for doc in range(int(docs.max()) + 1)
    ]


def test_speculators_train_loaders_pack_every_sample(target: Path, extraction: Path) -> None:
    """The trainer's own loaders (split, multipack, EAGLE-3 shift, collate) over an eyas extraction."""
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import ArrowDataset

    train, val = offline_loaders(extraction, target, total_seq_len=4 * MAX_LEN, train_data_ratio=0.75)
    expected: Counter[tuple[int, ...]] = Counter()
    by_ids: dict[tuple[int, ...], dict[str, torch.Tensor]] = {}
    reader = ArrowDataset(max_len=MAX_LEN, datapath=extraction, on_missing="raise")
    for i in range(len(reader)):
        shifted = shift_batch(reader[i])
        key = tuple(shifted["input_ids"].tolist())
        expected[key] += 1
        by_ids[key] = shifted

    seen: Counter[tuple[int, ...]] = Counter()
    with warnings.catch_warnings():  # the loaders pin memory (dataloader.py:80); no accelerator here
        warnings.filterwarnings("ignore", "'pin_memory' argument is set as true", UserWarning)
        batches = [*train, *val]
    for batch in batches:
        assert batch["hidden_states"].dtype == torch.bfloat16
        assert batch["error_records"] == 0
        for segment in _segments(batch):
            key = tuple(segment["input_ids"].tolist())
            seen[key] += 1
            want = by_ids[key]
            assert torch.equal(segment["loss_mask"], want["loss_mask"])
            assert torch.equal(segment["hidden_states"], want["hidden_states"].to(torch.bfloat16))
            assert torch.equal(
                segment["verifier_last_hidden_states"], want["verifier_last_hidden_states"].to(torch.bfloat16)
            )
    assert seen == expected  # every sample once across the train and val splits, none dropped


@pytest.mark.parametrize("draft_vocab_size", [16, 200])  # fewer and more than the data's distinct tokens
def test_speculators_vocab_mapping_from_eyas_token_freq_is_eyas_draft_vocab(
    extraction: Path, draft_vocab_size: int
) -> None:
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    token_freq = torch.load(extraction / "token_freq.pt", weights_only=True)  # as train/cli.py:367 loads it
    d2t, t2d = build_vocab_mappings_from_distribution(token_freq, draft_vocab_size, 256)

    ours = draft_token_ids(read_token_freq(extraction), draft_vocab_size, 256)
    assert torch.equal(d2t, d2t_offsets(ours))
    mask = torch.zeros(256, dtype=torch.bool)
    mask[ours] = True
    assert torch.equal(t2d, mask)
    ids, masks = read_dataset_rows(extraction)
    counted = Counter(
        t for row, keep in zip(ids, masks, strict=True) for t, m in zip(row, keep, strict=True) if m
    )
    assert token_freq == dict(counted)  # what speculators' save_token_frequency_distribution counts
