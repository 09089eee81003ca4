"""speculators 0.9.0's offline train/val loaders over an extraction folder, as its trainer builds them
(`speculators/train/dataloader.py` `create_train_val_loaders`) with no vLLM server to fall back on: a
missing sample raises instead of being regenerated. Shared by the layout and the side-by-side driver tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

HIDDEN = 32  # testsupport.tiny_targets' target


def offline_loaders(data_path: Path, target: Path, *, total_seq_len: int, train_data_ratio: float) -> Any:
    """(train, val) loaders of packed rows of `total_seq_len` tokens, bf16 states, EAGLE-3's shift."""
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.dataloader import create_train_val_loaders

    return create_train_val_loaders(
        data_path=str(data_path),
        total_seq_len=total_seq_len,
        hidden_states_dtype=torch.bfloat16,
        vllm_endpoint="http://unused",
        on_missing="raise",
        verifier_name_or_path=str(target),
        request_timeout=1.0,
        max_retries=0,
        generation_validation_retries=0,
        max_consecutive_generation_failures=1,
        hidden_size=HIDDEN,
        num_target_layers=3,
        num_workers=0,
        prefetch_factor=1,
        preprocess=shift_batch,
        train_data_ratio=train_data_ratio,
    )
