"""A tiny drafter and trainer built from a config (vocab 6, draft vocab 4), and random samples for them: with
so few ids a random drafter is right often enough that the accuracy counts the tests compare are not all zero.
Shared by the packing and the step-guard tests."""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from drafting.ml.drafter import Eagle3Drafter
from drafting.ml.target_head import TargetHead
from drafting.ml.train_data import Batch, Collate
from drafting.ml.trainer import OptimSettings, Trainer, make_optimizer

HIDDEN, VOCAB, DRAFT_VOCAB, TTT = 16, 6, 4, 4


def tiny_drafter() -> Eagle3Drafter:
    config = {
        "hidden_size": HIDDEN, "intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 256, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
    }  # fmt: skip
    torch.manual_seed(1)
    drafter = Eagle3Drafter(config)
    for param in drafter.parameters():  # norms start at 1; random weights make every input matter
        if param.requires_grad:
            torch.nn.init.normal_(param, std=0.3)
    drafter.set_vocab_mapping(torch.tensor([0, 0, 1, 1]))  # draft ids 0..3 -> target ids 0, 1, 3, 4
    return drafter.eval()


def tiny_trainer(attention: Any) -> Trainer:
    drafter = tiny_drafter()
    torch.manual_seed(2)
    # loose tensors and a Llama final norm: the trainer's mechanics, not a checkpoint's head
    head = TargetHead(torch.randn(VOCAB, HIDDEN), torch.randn(VOCAB, HIDDEN) * 3, LlamaRMSNorm(HIDDEN, 1e-6))
    drafter.set_target_embeddings(head.embed)
    settings = OptimSettings(
        lr=1e-3, warmup_steps=0, total_steps=10, schedule="constant", weight_decay=0.0, grad_clip=1.0
    )
    optimizer, scheduler = make_optimizer(drafter, settings, torch.device("cpu"))
    return Trainer(
        drafter, head, optimizer=optimizer, scheduler=scheduler, settings=settings, ttt_steps=TTT,
        step_decay=0.8, attention=attention, compute_dtype=torch.float32, device=torch.device("cpu"),
    )  # fmt: skip


def random_sample(length: int, seed: int) -> dict[str, torch.Tensor]:
    """A sample whose first tokens are assistant tokens too: were a step's target taken from the next sample,
    it would count."""
    rng = torch.Generator().manual_seed(seed)
    loss_mask = torch.rand(length, generator=rng) > 0.2
    loss_mask[:3] = True
    return {
        "input_ids": torch.randint(0, VOCAB, (length,), generator=rng),
        "loss_mask": loss_mask,
        "hidden": torch.randn(length, 4, HIDDEN, generator=rng),
    }


def batch_of_one(sample: dict[str, torch.Tensor]) -> Batch:
    return Collate()([sample])
