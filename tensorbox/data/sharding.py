"""Which rows each rank reads: the data-parallel split shared by ``BatchLoader`` and
``AugmentBuffer`` (``share_length``/``share_positions``, written once in
:mod:`tensorbox.distributed.sharding`, which ``shard_indices`` is built on too).

Every rank draws the same permutation of the epoch (from the seed and the epoch alone,
so the ranks agree without talking); rank ``r`` of ``R`` then takes the positions
``r, r + R, r + 2R, ...`` of it, as ``DistributedSampler`` does. The permutation is
first made a multiple of ``R`` long: padded by repeating its first rows
(``drop_last=False``: every rank runs the same number of steps, so no collective of
the training loop waits for a rank that has finished), or cut (``drop_last=True``).

>>> share_positions(5, num_replicas=2, rank=0, drop_last=False).tolist()
[0, 2, 4]
>>> share_positions(5, num_replicas=2, rank=1, drop_last=False).tolist()  # 5 is padding
[1, 3, 5]
>>> share_positions(5, num_replicas=2, rank=1, drop_last=True).tolist()
[1, 3]
>>> resolve_replicas(None, None)  # no process group: one replica
(1, 0)
"""

from __future__ import annotations

import torch.distributed as dist

from tensorbox.distributed.sharding import share_length, share_positions

__all__ = ["resolve_replicas", "share_length", "share_positions"]


def _group() -> tuple[int, int] | None:
    """``(world size, rank)`` of the default process group, or None without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return None


def resolve_replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """``(num_replicas, rank)``: what was given, the rest from the default process group.

    Without a process group a loader is its own one replica; ``num_replicas=1`` always
    means "read everything" (an evaluation run on rank 0 only).
    """
    group = _group()
    if num_replicas is None:
        if group is not None:
            num_replicas = group[0]
        elif rank is None:
            num_replicas = 1
        else:
            raise ValueError(
                f"rank={rank!r} was given without num_replicas, and no torch.distributed "
                "process group is initialised to take the world size from: pass "
                "num_replicas= too"
            )
    if rank is None:
        if num_replicas == 1:
            rank = 0
        elif group is not None:
            rank = group[1]
        else:
            raise ValueError(
                f"num_replicas={num_replicas!r} was given without rank, and no "
                "torch.distributed process group is initialised to take it from: pass rank= "
                "(0 <= rank < num_replicas)"
            )
    for name, value in (("num_replicas", num_replicas), ("rank", rank)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas!r}")
    if not 0 <= rank < num_replicas:
        raise ValueError(
            f"rank={rank!r} is outside [0, num_replicas={num_replicas!r}): pass a rank "
            f"from 0 to {num_replicas - 1}"
        )
    return num_replicas, rank
