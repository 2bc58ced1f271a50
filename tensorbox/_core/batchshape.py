"""The batch-shape family every tree-like class answers the same way.

``shape``, ``batch_dims``, ``ndim``, ``dim()`` and ``numel()`` all follow from the batch
size, so they are written once here, over the one attribute a class keeps it in
(``_batch_size``, a ``torch.Size``). The containers of ``_core/container.py`` and the
handles over other stores (``PersistentTensorDict``, the Redis store) take it as a mixin
and define ``batch_size`` themselves (each checks a new one its own way).

>>> import torch
>>> class Box(BatchShaped):
...     def __init__(self, size):
...         self._batch_size = torch.Size(size)
>>> b = Box([3, 4])
>>> b.shape, b.batch_dims, b.ndim, b.dim(), b.numel(), Box([]).numel()
(torch.Size([3, 4]), 2, 2, 2, 12, 1)
"""

from __future__ import annotations

import math

import torch

__all__ = ["BatchShaped"]


class BatchShaped:
    """``shape``/``batch_dims``/``ndim``/``dim()``/``numel()`` from ``self._batch_size``."""

    __slots__ = ()
    _batch_size: torch.Size

    @property
    def shape(self) -> torch.Size:
        """Same as ``batch_size`` (a container's shape is its batch size)."""
        return self._batch_size

    @property
    def batch_dims(self) -> int:
        """Number of batch dims."""
        return len(self._batch_size)

    @property
    def ndim(self) -> int:
        """Number of batch dims."""
        return len(self._batch_size)

    def dim(self) -> int:
        """Number of batch dims."""
        return len(self._batch_size)

    def numel(self) -> int:
        """Number of batch elements (the product of the batch size)."""
        return math.prod(self._batch_size)
