"""Which rows each rank reads: the one data-parallel split of tensorbox.

Every rank draws the same permutation of the epoch (from the seed and the epoch alone,
so the ranks agree without talking); rank ``r`` of ``R`` then takes the positions
``r, r + R, r + 2R, ...`` of it, as ``torch.utils.data.DistributedSampler`` does. The
permutation is first made a multiple of ``R`` long: padded by repeating its first rows
(``drop_last=False``: every rank runs the same number of steps, so no collective of
the training loop waits for a rank that has finished), or cut (``drop_last=True``).
``shard_indices`` gives the rows themselves; ``BatchLoader`` and ``AugmentBuffer``
(:mod:`tensorbox.data.sharding`) use the positions.

>>> share_positions(5, num_replicas=2, rank=1, drop_last=False).tolist()  # 5 is padding
[1, 3, 5]
>>> shard_indices(10, rank=1, world_size=3).tolist()
[1, 4, 7, 0]
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["shard_indices", "share_length", "share_positions"]


def share_length(n: int, num_replicas: int, drop_last: bool) -> int:
    """Rows per rank when ``n`` rows are split ``num_replicas`` ways."""
    return n // num_replicas if drop_last else -(-n // num_replicas)


def share_positions(n: int, num_replicas: int, rank: int, drop_last: bool) -> Tensor:
    """Positions, in an epoch's order of ``n`` rows, that ``rank`` reads (int64).

    Positions ``>= n`` are padding: position ``p`` stands for row ``order[p % n]``.
    """
    total = share_length(n, num_replicas, drop_last) * num_replicas
    return torch.arange(rank, max(rank, total), num_replicas, dtype=torch.int64)


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

    >>> shard_indices(10, 1, 3, drop_last=True).tolist()
    [1, 4, 7]
    """
    if rank is None or world_size is None:
        from tensorbox.distributed.channel import _pg

        _pg(None, "shard_indices without rank= and world_size=")  # no group: DistributedError
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    if n < 0 or world_size < 1 or not 0 <= rank < world_size:
        got = f"n={n!r}, rank={rank!r}, world_size={world_size!r}"
        raise ValueError(f"shard_indices: need n >= 0 and 0 <= rank < world_size, got {got}")
    positions = share_positions(n, world_size, rank, drop_last)
    if n == 0:
        return positions
    g = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(n, generator=g) if shuffle else torch.arange(n)
    return order[positions % n]
