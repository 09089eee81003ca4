"""The tokenized side of an extraction: the HF dataset rows, token frequencies, and the input fingerprint."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from drafting.ml.conversations import TokenizedSample
from drafting.ml.hidden_store import TOKEN_FREQ
from drafting.userfiles import Cap, check_model_folder, check_regular, open_user_file

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


def file_sha256(path: Path, cap: int = Cap.DATASET, what: str = "file") -> str:
    digest = hashlib.sha256()
    with open_user_file(path, cap, what) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tokenizer_sha256(folder: Path) -> str:
    """One digest over the tokenizer files that decide ids and the chat template."""
    digest = hashlib.sha256()
    for name in _TOKENIZER_FILES:
        path = Path(folder) / name
        if os.path.lexists(path):
            cap = Cap.TOKENIZER if name == "tokenizer.json" else Cap.CONFIG
            digest.update(name.encode() + b"\0" + file_sha256(path, cap, name).encode())
    return digest.hexdigest()


def fingerprint(inputs: dict[str, Any]) -> str:
    """What makes two extractions interchangeable; resuming into an output with another one is refused."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def write_dataset(output: Path, samples: list[TokenizedSample]) -> None:
    """speculators' dataset: input_ids, loss_mask (int64) and seq_len per row, saved in torch format."""
    from datasets import Dataset

    dataset = Dataset.from_dict(
        {
            "input_ids": [s.input_ids for s in samples],
            "loss_mask": [s.loss_mask for s in samples],
            "seq_len": [len(s.input_ids) for s in samples],
        }
    )
    dataset.set_format(type="torch")
    staging = Path(output) / ".dataset.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    dataset.save_to_disk(str(staging))
    for path in staging.iterdir():
        os.replace(path, Path(output) / path.name)
    staging.rmdir()


def read_dataset_rows(output: Path) -> tuple[list[list[int]], list[list[int]]]:
    check_model_folder(output, "extraction folder")  # datasets opens its files with plain `open`
    """(input_ids, loss_mask) of every row, as plain lists."""
    from datasets import load_from_disk

    dataset = load_from_disk(str(output)).with_format(None)
    return list(dataset["input_ids"]), list(dataset["loss_mask"])


def write_token_freq(output: Path, samples: list[TokenizedSample]) -> dict[int, int]:
    """{token_id: count} over loss-masked tokens, as speculators' `token_freq.pt`."""
    counts: Counter[int] = Counter()
    for sample in samples:
        counts.update(t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m)
    frequencies = dict(counts)
    tmp = Path(output) / f"{TOKEN_FREQ}.tmp"
    torch.save(frequencies, tmp)
    os.replace(tmp, Path(output) / TOKEN_FREQ)
    return frequencies


def read_token_freq(output: Path) -> dict[int, int]:
    path = Path(output) / TOKEN_FREQ
    check_regular(path, Cap.TOKENIZER, TOKEN_FREQ)
    frequencies: dict[int, int] = torch.load(path, weights_only=True)
    return {int(k): int(v) for k, v in frequencies.items()}
