"""An eyas extraction as speculators 0.9.0's trainer reads it: whether it can (each problem names the file
or field that differs and the speculators code that reads it), the view of it that holds out eyas's
validation rows, and the packed row length that gives eyas's batch (bench.speculators_side_by_side)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from drafting.ml.train_data import split_indices

STATES = 4  # 3 aux states + the last layer's output before the final norm, per token
MAX_PROBLEMS = 20


def reading_problems(extraction: Path, hidden_size: int) -> list[str]:
    """Why speculators' trainer could not read `extraction`: each problem names the file or field that
    differs and the speculators code that reads it. [] when it can read it."""
    from datasets import load_from_disk

    try:
        data = load_from_disk(str(extraction))
    except Exception as exc:  # noqa: BLE001 - whatever stops load_from_disk is the finding
        return [f"{extraction}: load_from_disk fails ({exc}); speculators opens it so (train/data.py:164)"]
    missing = sorted({"input_ids", "loss_mask", "seq_len"} - set(data.column_names))
    if missing:
        return [
            f"dataset column(s) {missing} missing: speculators reads seq_len (train/data.py:225), "
            "input_ids (:314) and loss_mask (:332)"
        ]
    problems = []
    if data.format["type"] != "torch":
        problems.append(
            f"dataset format {data.format['type']!r}, not 'torch': speculators compares input_ids with "
            "torch.equal (train/data.py:314) and slices loss_mask as a tensor"
        )
    rows = data.with_format(None)
    columns = zip(rows["input_ids"], rows["loss_mask"], rows["seq_len"], strict=True)
    for i, (ids, mask, seq_len) in enumerate(columns):
        if seq_len != len(ids) or len(mask) != len(ids):
            problems.append(
                f"row {i}: seq_len {seq_len}, input_ids {len(ids)}, loss_mask {len(mask)} tokens differ "
                "(the multipack sampler packs by seq_len, train/data.py:225)"
            )
        problems += _file_problems(extraction / "hidden_states" / f"hs_{i}.safetensors", i, ids, hidden_size)
        if len(problems) >= MAX_PROBLEMS:
            return [*problems, "… (stopped after the first problems)"]
    try:
        freq = torch.load(extraction / "token_freq.pt", weights_only=True)
        if not isinstance(freq, dict) or not all(isinstance(k, int) for k in freq):
            problems.append("token_freq.pt is not a {token_id: count} dict (train/vocab_mapping.py:74-106)")
    except Exception as exc:  # noqa: BLE001 - a missing or unreadable file is the finding
        problems.append(f"token_freq.pt unreadable with weights_only=True ({exc}; train/cli.py:360-367)")
    return problems


def _file_problems(path: Path, row: int, ids: list[int], hidden_size: int) -> list[str]:
    """What speculators' reader (train/data.py:309-333) would trip on in row `row`'s hidden-state file."""
    from safetensors import safe_open

    name = f"hidden_states/{path.name}"
    if not path.is_file():
        return [f"{name} missing for row {row} (hs_connectors/transfer.py:141-143; the trainer raises)"]
    with safe_open(str(path), "pt") as stored:
        keys = set(stored.keys())
        if not {"token_ids", "hidden_states"} <= keys:
            return [f"{name}: keys {sorted(keys)}, speculators reads token_ids and hidden_states"]
        problems = []
        shape = list(stored.get_slice("hidden_states").get_shape())
        if shape != [len(ids), STATES, hidden_size]:
            problems.append(
                f"{name}: hidden_states {shape}, speculators needs [{len(ids)}, {STATES}, {hidden_size}] "
                "([:, :-1] the aux states, [:, -1] the last one; train/data.py:324-331)"
            )
        if stored.get_tensor("token_ids").tolist() != ids:
            problems.append(
                f"{name}: token_ids differ from row {row}'s input_ids (speculators drops the sample, "
                "train/data.py:314-322)"
            )
    return problems


def make_view(extraction: Path, view: Path, val_fraction: float, seed: int) -> dict[str, Any]:
    """`view`: the extraction's rows reordered so that eyas's validation rows come last (speculators holds
    out the last rows, train/data.py:172-182), its hidden-state files links to the extraction's. speculators
    caches d2t/t2d there (train/cli.py:387-393), never in the extraction."""
    from datasets import load_from_disk

    data = load_from_disk(str(extraction))
    train, val = split_indices(len(data), val_fraction, seed)
    order = train + val
    view.mkdir(parents=True)
    picked = data.select(order)
    picked.set_format("torch")
    picked.save_to_disk(str(view))
    (view / "hidden_states").mkdir()
    for new, old in enumerate(order):
        (view / "hidden_states" / f"hs_{new}.safetensors").symlink_to(
            (extraction / "hidden_states" / f"hs_{old}.safetensors").resolve()
        )
    (view / "token_freq.pt").symlink_to((extraction / "token_freq.pt").resolve())
    ratio = (len(train) + 0.5) / len(order)  # int(n * ratio) == len(train): the split speculators computes
    assert int(len(order) * ratio) == len(train)
    lengths = [int(n) for n in data.with_format(None)["seq_len"]]
    return {"train_rows": train, "val_rows": val, "ratio": ratio, "lengths": lengths}


def total_seq_len(lengths: list[int], train_rows: list[int], batch_size: int) -> int:
    """Tokens of speculators' one packed row per step: batch_size average training samples (so an epoch has
    about as many optimizer steps as eyas's batches), at least the longest sample, rounded up to 128."""
    train = [lengths[i] for i in train_rows]
    wanted = max(max(train), math.ceil(batch_size * sum(train) / len(train)))
    return 128 * math.ceil(wanted / 128)
