"""``tensorbox.stack`` and ``tensorbox.cat``: ``torch.stack``/``torch.cat`` typed by their items.

``torch.stack([td, td])`` works on containers (``__torch_function__`` routes it to
``_stackcat``), but a type checker reads torch's signature and sees a ``Tensor``.
These wrappers make the same call and tell the checker the truth: a list of a
tensorclass stacks into that tensorclass, a list of tensors into a tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from torch import Tensor

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = ["cat", "stack"]

T = TypeVar("T", bound="Tensor | TensorCollection")


def stack(items: Sequence[T], dim: int = 0, *, out: T | None = None) -> T:
    """``torch.stack(items, dim)``: a new batch dim at ``dim``, typed as the items.

    Every item must have the same batch size (the same shape, for tensors) and,
    for containers, the same keys. ``out=`` receives the result in place.

    >>> import torch, tensorbox
    >>> td = tensorbox.TensorDict(x=torch.zeros(3, 2), batch_size=[3])
    >>> tensorbox.stack([td, td], dim=1).batch_size
    torch.Size([3, 2])
    >>> tensorbox.stack([torch.zeros(2), torch.ones(2)]).tolist()
    [[0.0, 0.0], [1.0, 1.0]]
    """
    seq = cast(Any, items if type(items) in (list, tuple) else list(items))
    return cast(T, torch.stack(seq, dim, out=cast(Any, out)))


def cat(items: Sequence[T], dim: int = 0, *, out: T | None = None) -> T:
    """``torch.cat(items, dim)``: joined along the existing batch dim ``dim``, typed as the items.

    The batch sizes must agree except along ``dim``; containers need the same keys.
    ``out=`` receives the result in place.

    >>> import torch, tensorbox
    >>> td = tensorbox.TensorDict(x=torch.zeros(3, 2), batch_size=[3])
    >>> tensorbox.cat([td, td]).batch_size
    torch.Size([6])
    >>> tensorbox.cat([torch.zeros(1), torch.ones(2)]).tolist()
    [0.0, 1.0, 1.0]
    """
    seq = cast(Any, items if type(items) in (list, tuple) else list(items))
    return cast(T, torch.cat(seq, dim, out=cast(Any, out)))
