"""``pad(..., inplace=True)`` of a lazy stack: the members are padded in place (they stay
the same objects) and members are added or dropped along the stack dim.

>>> import torch
>>> from tensorbox import TensorDict, lazy_stack
>>> s = lazy_stack([TensorDict(x=torch.ones(2), batch_size=[2])] * 1, 0)
>>> s.pad([0, 1, 0, 1], value=5.0, inplace=True).batch_size
torch.Size([2, 3])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorbox.errors import LockedError

__all__ = ["pad_in_place"]


def pad_in_place(stack: Any, pad_size: Sequence[int], value: float, dense_pad: Any) -> None:
    """Pad ``stack`` (a ``LazyStackedTensorDict``) in place. ``dense_pad(sizes, value)``
    gives the padded dense container: it checks the sizes before anything changes, and
    its slices along the stack dim are the members added there."""
    if stack._locked:
        raise LockedError("pad(inplace=True) on a locked lazy stack: unlock_() first")
    sizes = [int(p) for p in pad_size]
    dense = dense_pad(sizes, value)  # raises for bad sizes, before any change
    pairs = [(sizes[2 * i], sizes[2 * i + 1]) for i in range(len(sizes) // 2)]
    dim = stack._stack_dim
    before, after = pairs[dim] if dim < len(pairs) else (0, 0)
    inner = [p for i, pair in enumerate(pairs) if i != dim for p in pair]
    members = stack._members
    if any(inner):
        # a member stacked twice (lazy_stack([td, td])) is padded once
        for td in {id(td): td for td in members}.values():
            td.pad(inner, value, inplace=True)
    kept = members[max(-before, 0) : len(members) - max(-after, 0)]
    rows = dense.unbind(dim)
    front = list(rows[: max(before, 0)])
    back = list(rows[len(rows) - max(after, 0) :]) if after > 0 else []
    stack._members = front + kept + back
    stack._batch_size = stack._stacked_size()
