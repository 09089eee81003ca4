"""Data-parallel training over processes that torchrun started: joining the group, and the few collectives
the training loop needs.

One process per GPU with NCCL, or CPU processes with gloo (how the tests and a laptop exercise the same
code). Outside torchrun everything here is a no-op for a world of one, so the trainer has one code path.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar, cast

import torch
import torch.distributed as dist

# A rank waits this long in a collective for its peers. Rank 0 alone writes checkpoints and the training
# state between steps, so the others may wait for a large save on a slow filesystem; a peer that dies is
# noticed by torchrun at once and does not depend on this.
COLLECTIVE_TIMEOUT = timedelta(minutes=30)
T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


def launched_by_torchrun() -> bool:
    return dist.is_available() and dist.is_torchelastic_launched()


def join(device_type: str) -> Ranks:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPUs); a world of one outside torchrun."""
    if not launched_by_torchrun():
        return Ranks()
    local_rank = dist.get_node_local_rank(fallback_rank=0)
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    backend = "nccl" if device_type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    return Ranks(dist.get_rank(), dist.get_world_size(), local_rank)


def leave() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def from_main(ranks: Ranks, value: T | None) -> T:
    """Rank 0's `value` on every rank (pickled; for small things such as a list of sample ids)."""
    if not ranks.distributed:
        assert value is not None
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return cast(T, box[0])


def sum_across(ranks: Ranks, tensor: torch.Tensor) -> torch.Tensor:
    """The element-wise sum over all ranks (in place; the tensor itself for a world of one)."""
    if ranks.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def max_across(ranks: Ranks, tensor: torch.Tensor) -> torch.Tensor:
    if ranks.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor
