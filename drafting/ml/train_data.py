"""Reading an extraction for training: checks against the target, the train/val split, batches, collation."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from drafting.ml._config import check_aux_layers, text_config
from drafting.ml._dataset import read_token_freq
from drafting.ml.hidden_store import STATES_PER_TOKEN, load_sample, read_manifest
from drafting.ml.packing import Pack, RowLayout, epoch_packs, row_layout
from drafting.sglang_facts import SGLANG_VERSION_ON_GPU_HOST
from drafting.support_matrix import CaptureKind
from drafting.userfiles import check_model_folder

LENGTH_GROUP_BATCHES = 32  # batches per length-sorted group: little padding, still well shuffled

# An epoch's batches: of dataset rows, or (packing) of packed rows, each the dataset rows it holds.
EpochPlan = list[list[int]] | list[list[Pack]]


class ExtractionMismatch(Exception):
    """The extraction cannot train a drafter for this target (or is not a finished extraction)."""


@dataclass(frozen=True)
class Extraction:
    folder: Path
    manifest: dict[str, Any]
    seq_lens: list[int]
    token_freq: dict[int, int]

    @property
    def aux_layers(self) -> list[int]:
        return [int(i) for i in self.manifest["aux_layers"]]

    @property
    def hidden_size(self) -> int:
        return int(self.manifest["target"]["hidden_size"])

    @property
    def aux_capture(self) -> CaptureKind:
        """What the aux states are; extractions written before eyas recorded it hold the residual stream."""
        return CaptureKind(self.manifest.get("aux_capture", CaptureKind.RESIDUAL_STREAM.value))

    @property
    def sglang_version(self) -> str:
        """The SGLang release whose capture the extraction followed (the release the draft is for)."""
        return str(self.manifest.get("sglang_version", SGLANG_VERSION_ON_GPU_HOST))


def open_extraction(folder: Path, target_config: dict[str, Any]) -> Extraction:
    from datasets import load_from_disk

    manifest = read_manifest(folder)
    if manifest is None:
        raise ExtractionMismatch(f"{folder} holds no eyas extraction (no eyas_manifest.json)")
    if manifest.get("status") != "complete":
        raise ExtractionMismatch(f"the extraction in {folder} is {manifest.get('status')}: finish it first")
    problems = _mismatches(manifest, target_config)
    if problems:
        raise ExtractionMismatch("the extraction does not match the target: " + "; ".join(problems))
    check_model_folder(folder, "extraction folder")  # datasets opens its files with plain `open`
    seq_lens = [int(n) for n in load_from_disk(str(folder)).with_format(None)["seq_len"]]
    return Extraction(Path(folder), manifest, seq_lens, read_token_freq(folder))


def open_held_out(folder: Path, target_config: dict[str, Any], training: Extraction) -> Extraction:
    """An extraction of prompts kept out of training, to validate on: a finished one of the same target that
    the drafter reads as it reads the training one (aux layers, hidden size, tokenizer), with samples."""
    try:
        held_out = open_extraction(folder, target_config)
    except ExtractionMismatch as exc:
        raise ExtractionMismatch(f"held_out_data {folder}: {exc}") from None
    ours, theirs = held_out.manifest, training.manifest
    pairs = {
        "aux_layers": (held_out.aux_layers, training.aux_layers),
        "aux_capture": (held_out.aux_capture, training.aux_capture),
        "hidden_size": (held_out.hidden_size, training.hidden_size),
        "tokenizer_sha256": (_tokenizer_hash(ours), _tokenizer_hash(theirs)),
    }
    problems = [
        f"{key} {mine} in the held-out extraction, {train} in the training one"
        for key, (mine, train) in pairs.items()
        if mine != train
    ]
    if problems:
        raise ExtractionMismatch(
            f"held_out_data {folder} does not match the training extraction {training.folder}: "
            + "; ".join(problems)
        )
    if ours.get("fingerprint") == theirs.get("fingerprint"):
        raise ExtractionMismatch(
            f"held_out_data {folder} is an extraction of the training data itself ({training.folder}): "
            "its prompts are not kept out of training"
        )
    if not held_out.seq_lens:
        raise ExtractionMismatch(f"held_out_data {folder} holds no samples: nothing to validate on")
    return held_out


def _tokenizer_hash(manifest: dict[str, Any]) -> Any:
    inputs = manifest.get("inputs")
    return inputs.get("tokenizer_sha256") if isinstance(inputs, dict) else None


def _mismatches(manifest: dict[str, Any], target_config: dict[str, Any]) -> list[str]:
    text, stored = text_config(target_config), manifest["target"]
    problems = [
        f"{key} {stored.get(key)} in the extraction, {text.get(key)} in the target"
        for key in ("hidden_size", "num_hidden_layers", "vocab_size")
        if stored.get(key) != text.get(key)
    ]
    try:
        check_aux_layers([int(i) for i in manifest["aux_layers"]], int(text["num_hidden_layers"]))
    except ValueError as exc:
        problems.append(str(exc))
    return problems


def split_indices(count: int, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, val) row indices: a seeded shuffle, the first `val_fraction` of it held out."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    held_out = min(round(count * val_fraction), count - 1) if val_fraction > 0 else 0
    if val_fraction > 0 and count > 1:
        held_out = max(held_out, 1)
    return sorted(order[held_out:]), sorted(order[:held_out])


def training_subset(train_rows: list[int], count: int | None, seed: int) -> list[int]:
    """`count` of `train_rows` (all when None or more): the first of a seeded shuffle, so for one seed a
    smaller count's rows are among a larger one's (a data-size curve grows one set of samples)."""
    if count is None or count >= len(train_rows):
        return train_rows
    order = list(train_rows)
    random.Random(f"train_samples:{seed}").shuffle(order)
    return sorted(order[:count])


def epoch_batches(
    indices: list[int],
    seq_lens: list[int],
    *,
    batch_size: int,
    epoch: int,
    seed: int,
    rank: int = 0,
    world: int = 1,
) -> list[list[int]]:
    """This epoch's batches, the same on every run for a given seed (resume relies on it).

    Rows are shuffled, grouped by similar length within windows of LENGTH_GROUP_BATCHES batches (so padding
    stays small), and the batches shuffled again; with several ranks each takes every world-th batch.
    """
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(indices)
    rng.shuffle(order)
    window = batch_size * LENGTH_GROUP_BATCHES
    batches = []
    for start in range(0, len(order), window):
        group = sorted(order[start : start + window], key=lambda i: seq_lens[i])
        batches += [group[i : i + batch_size] for i in range(0, len(group), batch_size)]
    rng.shuffle(batches)
    usable = len(batches) - len(batches) % world if world > 1 else len(batches)
    return batches[rank:usable:world]


def epoch_plan(
    indices: list[int],
    seq_lens: list[int],
    *,
    batch_size: int,
    epoch: int,
    seed: int,
    rank: int = 0,
    world: int = 1,
    pack_len: int | None = None,
) -> EpochPlan:
    """`epoch_batches`, or with `pack_len` batches of `batch_size` packed rows of up to `pack_len` tokens
    (drafting/ml/packing.py `epoch_packs`)."""
    if pack_len is None:
        return epoch_batches(
            indices, seq_lens, batch_size=batch_size, epoch=epoch, seed=seed, rank=rank, world=world
        )
    return epoch_packs(
        indices,
        seq_lens,
        rows_per_batch=batch_size,
        row_len=pack_len,
        epoch=epoch,
        seed=seed,
        rank=rank,
        world=world,
    )


def run_steps(epochs: int, indices: list[int], seq_lens: list[int], **batching: Any) -> int:
    """Optimizer steps over all epochs (`batching`: epoch_plan's keywords but the epoch): epochs x one
    epoch's, except that packing plans each epoch anew, and its count of rows may differ a little."""
    if batching.get("pack_len") is None:
        return epochs * len(epoch_plan(indices, seq_lens, epoch=0, **batching))
    return sum(len(epoch_plan(indices, seq_lens, epoch=e, **batching)) for e in range(epochs))


class HiddenStateDataset(Dataset[dict[str, torch.Tensor]]):
    """Row i of an extraction, cut to max_len: token ids, loss mask and the 4 stored states per token."""

    def __init__(self, extraction: Extraction, max_len: int) -> None:
        from datasets import load_from_disk

        self.folder = extraction.folder
        self.max_len = max_len
        self.rows = load_from_disk(str(extraction.folder)).with_format(None)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int | Pack) -> dict[str, torch.Tensor]:
        """Dataset row `index`, or a packed row: the rows of a Pack back to back, with their lengths."""
        if isinstance(index, tuple):
            samples = [self._sample(i) for i in index]
            packed = {key: torch.cat([s[key] for s in samples]) for key in samples[0]}
            packed["sample_lengths"] = torch.tensor([s["input_ids"].shape[0] for s in samples])
            return packed
        return self._sample(index)

    def _sample(self, index: int) -> dict[str, torch.Tensor]:
        stored = load_sample(self.folder, index)
        keep = min(self.max_len, stored["token_ids"].shape[0])
        loss_mask = torch.tensor(self.rows[index]["loss_mask"][:keep], dtype=torch.bool)
        return {
            "input_ids": stored["token_ids"][:keep],
            "loss_mask": loss_mask,
            "hidden": stored["hidden_states"][:keep],
            "rows": torch.tensor([index]),  # a Pack's are concatenated like the rest
        }


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, S] int64, 0 past each row's length
    loss_mask: torch.Tensor  # [B, S] bool
    hidden: torch.Tensor  # [B, S, 4, T]
    lengths: torch.Tensor  # [B] tokens per row
    layout: RowLayout | None = None  # packed rows: where each sample sits (None: one sample per row)
    # per row, its samples in order as (dataset row, tokens): what ArgmaxCache keys by (None: not from one)
    samples: tuple[tuple[tuple[int, int], ...], ...] | None = None

    def to(self, device: torch.device) -> Batch:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=True)

        return Batch(
            move(self.input_ids),
            move(self.loss_mask),
            move(self.hidden),
            move(self.lengths),
            self.layout.to(device) if self.layout is not None else None,
            self.samples,
        )

    def pin_memory(self) -> Batch:
        """Called by DataLoader(pin_memory=True) so host-to-device copies can run asynchronously."""
        return Batch(
            self.input_ids.pin_memory(),
            self.loss_mask.pin_memory(),
            self.hidden.pin_memory(),
            self.lengths.pin_memory(),
            self.layout.pin_memory() if self.layout is not None else None,
            self.samples,
        )

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())


class Collate:
    """Right-pads a batch; `pad_multiple` rounds the length up so compiled GPU kernels see few shapes."""

    def __init__(self, pad_multiple: int = 1) -> None:
        self.pad_multiple = pad_multiple

    def __call__(self, items: list[dict[str, torch.Tensor]]) -> Batch:
        longest = max(item["input_ids"].shape[0] for item in items)
        seq = -(-longest // self.pad_multiple) * self.pad_multiple
        first = items[0]["hidden"]
        batch = Batch(
            input_ids=torch.zeros(len(items), seq, dtype=torch.long),
            loss_mask=torch.zeros(len(items), seq, dtype=torch.bool),
            hidden=torch.zeros(len(items), seq, STATES_PER_TOKEN, first.shape[-1], dtype=first.dtype),
            lengths=torch.tensor([item["input_ids"].shape[0] for item in items]),
        )
        for row, item in enumerate(items):
            n = item["input_ids"].shape[0]
            batch.input_ids[row, :n] = item["input_ids"]
            batch.loss_mask[row, :n] = item["loss_mask"]
            batch.hidden[row, :n] = item["hidden"]
        if "sample_lengths" in items[0]:
            batch.layout = row_layout([item["sample_lengths"].tolist() for item in items], seq)
        if "rows" in items[0]:
            batch.samples = tuple(_row_samples(item) for item in items)
        return batch


def _row_samples(item: dict[str, torch.Tensor]) -> tuple[tuple[int, int], ...]:
    lengths = item["sample_lengths"].tolist() if "sample_lengths" in item else [item["input_ids"].shape[0]]
    return tuple(zip(item["rows"].tolist(), lengths, strict=True))


def batch_loader(
    dataset: HiddenStateDataset,
    batches: EpochPlan,
    *,
    workers: int,
    pin_memory: bool,
    pad_multiple: int,
) -> DataLoader[Batch]:
    return DataLoader(
        dataset,  # type: ignore[arg-type]
        batch_sampler=batches,
        collate_fn=Collate(pad_multiple),
        num_workers=workers,
        pin_memory=pin_memory,
    )
