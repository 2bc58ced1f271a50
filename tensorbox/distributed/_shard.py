"""``shard_indices``: the rows of a dataset one rank reads, as ``DistributedSampler`` orders them.

Public as ``tensorbox.distributed.shard_indices``.

>>> shard_indices(10, 1, 4).tolist()
[1, 5, 9]
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["shard_indices"]


def shard_indices(
    n: int,
    rank: int | None = None,
    world_size: int | None = None,
    *,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
) -> Tensor:
    """The rows of an ``n``-row dataset that ``rank`` reads (int64), in the order
    ``DistributedSampler(num_replicas=world_size, ...)`` yields them: shuffled by
    ``seed + epoch``, padded by repeating the first rows so that every rank gets as
    many, or with ``drop_last`` cut to a multiple of ``world_size``. ``rank`` and
    ``world_size`` default to the process group's. Index a memmapped TensorDict with
    them, a batch at a time, and each rank reads only its own rows from disk.
    """
    if rank is None or world_size is None:
        from tensorbox.distributed import _pg  # raises DistributedError without a process group

        _pg(None, "shard_indices without rank= and world_size=")
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    if n < 0 or world_size < 1 or not 0 <= rank < world_size:
        got = f"n={n!r}, rank={rank!r}, world_size={world_size!r}"
        raise ValueError(f"shard_indices: need n >= 0 and 0 <= rank < world_size, got {got}")
    short = drop_last and n % world_size
    total = math.ceil((n - world_size if short else n) / world_size) * world_size
    g = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(n, generator=g) if shuffle else torch.arange(n)
    if total > n:
        order = torch.cat([order, order.repeat(math.ceil((total - n) / n))[: total - n]])
    return order[rank:total:world_size]
