"""Batch sizes: parsing, checking leaves against them, and what an index does to them.

Batch dims are the leading dims shared by every leaf; an index only ever
touches those. ``normalize_index`` turns a user index into one that is safe to
apply to a leaf with trailing feature dims (``...`` is expanded over the batch
dims only, so it never reaches a feature dim).

>>> import torch
>>> normalize_index((..., 0), 2)
(slice(None, None, None), 0)
>>> as_batch_size(3), as_batch_size([2, 5])
(torch.Size([3]), torch.Size([2, 5]))
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tensorbox.errors import BatchDimError, BatchSizeError

__all__ = [
    "as_batch_size",
    "check_dim",
    "index_dims",
    "leads_with",
    "list_shape",
    "normalize_index",
    "shape_from_args",
]

_Size = torch.Size


def as_batch_size(batch_size: Any) -> torch.Size:
    """Parse ``batch_size`` given as None, an int, a sequence of ints or a ``torch.Size``."""
    t = type(batch_size)
    if t is _Size:
        return batch_size  # type: ignore[no-any-return]  # a torch.Size (t is _Size)
    if batch_size is None:
        return _Size(())
    if t is list or t is tuple:  # the common case, checked without the general machinery
        for d in batch_size:
            if type(d) is not int or d < 0:
                break
        else:
            return _Size(batch_size)
    elif t is int and batch_size >= 0:
        return _Size((batch_size,))
    if isinstance(batch_size, (int, np.integer)) and not isinstance(batch_size, bool):
        dims: Sequence[Any] = (int(batch_size),)
    elif isinstance(batch_size, torch.Tensor) and batch_size.ndim <= 1:
        dims = batch_size.reshape(-1).tolist()
    elif isinstance(batch_size, Sequence) and not isinstance(batch_size, str):
        dims = batch_size
    else:
        raise BatchSizeError(f"batch_size must be an int or a sequence of ints, got {batch_size!r}")
    dims = [
        int(d) if isinstance(d, torch.Tensor) and d.ndim == 0 and not d.is_floating_point() else d
        for d in dims
    ]
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise BatchSizeError(f"batch_size must hold non-negative ints, got {list(dims)!r}")
    return _Size([int(d) for d in dims])


def index_dims(dims: Any, not_ints: str, negative: str, given: Any = None) -> tuple[int, ...]:
    """``dims`` as ints (each taken through ``__index__``: no floats), or the caller's
    error: a TypeError ``not_ints`` where one is no int, a ValueError ``negative`` where
    one is below 0. The messages are ``str.format`` templates, filled only on error:
    ``{given}`` is ``given`` (default: ``dims``), ``{dims}`` the ints.

    >>> index_dims([2, 3], "{given!r}: not ints", "{dims}: negative")
    (2, 3)
    """
    try:
        out = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise TypeError(not_ints.format(given=dims if given is None else given)) from None
    if any(d < 0 for d in out):
        raise ValueError(negative.format(dims=out))
    return out


def list_shape(values: list[Any]) -> list[int]:
    """The shape of nested (plain) lists, read down the first item of each level and
    stopping at an empty one: ``[[1, 2], [3, 4], [5, 6]]`` is ``[3, 2]``. Ragged lists
    are for the caller to find as it fills an array of this shape.

    >>> list_shape([[1, 2], [3, 4], [5, 6]]), list_shape([[], []]), list_shape([[[1]]])
    ([3, 2], [2, 0], [1, 1, 1])
    """
    shape: list[int] = []
    level: Any = values
    while type(level) is list:
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    return shape


def shape_from_args(args: tuple[Any, ...]) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both mean the shape ``(2, 3)``, as in torch."""
    if len(args) == 1 and isinstance(args[0], (Sequence, torch.Size)):
        return tuple(args[0])
    return tuple(args)


def check_dim(dim: int, ndim: int, what: str = "dim") -> int:
    """Wrap a possibly negative ``dim`` into ``range(ndim)`` or raise ``IndexError``."""
    if not -ndim <= dim < ndim:
        raise BatchDimError(
            f"{what} {dim} is out of range for {ndim} batch dim(s) "
            f"(expected a value in [{-ndim}, {ndim - 1}])"
        )
    return dim + ndim if dim < 0 else dim


def _dims_used(item: Any) -> int:
    """How many batch dims one component of an index consumes."""
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0
    if isinstance(item, torch.Tensor):
        return item.ndim if item.dtype is torch.bool else 1
    if isinstance(item, np.ndarray):
        return item.ndim if item.dtype == np.bool_ else 1
    return 1


def normalize_index(index: Any, batch_dims: int) -> Any:
    """Return ``index`` in a form that only addresses the first ``batch_dims`` dims.

    Raises ``IndexError`` when the index uses more dims than there are batch dims.
    """
    items = index if isinstance(index, tuple) else (index,)
    used = 0
    ellipsis = 0
    for it in items:
        if it is Ellipsis:
            ellipsis += 1
        else:
            used += _dims_used(it)
    if ellipsis > 1:
        raise IndexError(f"an index can only have a single ellipsis (...), got {index!r}")
    if used > batch_dims:
        raise IndexError(
            f"too many indices: {index!r} indexes {used} dim(s) but the batch has only "
            f"{batch_dims} (indexing never reaches feature dims)"
        )
    if ellipsis:
        fill = (slice(None),) * (batch_dims - used)
        out: list[Any] = []
        for it in items:
            if it is Ellipsis:
                out.extend(fill)
            else:
                out.append(it)
        return tuple(out)
    return index


def leads_with(shape: torch.Size, batch_size: torch.Size) -> bool:
    """``shape[:len(batch_size)] == batch_size``, without slicing a ``torch.Size``
    for the common 0 or 1 batch dims (slicing one costs several times more)."""
    n = len(batch_size)
    if n == 1:
        return len(shape) > 0 and shape[0] == batch_size[0]
    return n == 0 or shape[:n] == batch_size


def check_leaf_shape(path: str, shape: torch.Size, batch_size: torch.Size) -> None:
    """Raise ``BatchSizeError`` when ``shape`` does not start with ``batch_size``."""
    if shape[: len(batch_size)] != batch_size:
        raise BatchSizeError(
            f"key {path} has shape {tuple(shape)}, which does not start with "
            f"batch_size {tuple(batch_size)}"
        )
