"""Bounded copies: move a large tensor in slices so no temporary exceeds one chunk.

A copy that converts dtype, crosses devices or reads a memory-mapped file
materializes its source in the destination's format. Doing it in slices of at
most :data:`CHUNK_BYTES` bounds that temporary (and the pages faulted in at once)
whatever the tensor's size. In-place writes into containers (``set_``,
``update_``), weight loading (``to_module(inplace=True)``, ``load_state_dict``)
and file writes all use this one constant and this one function.

>>> import torch
>>> dst = torch.empty(1000, 3)
>>> copy_chunked(dst, torch.ones(1000, 3, dtype=torch.float64), chunk_bytes=256).sum().item()
3000.0
"""

from __future__ import annotations

import torch
from torch import Tensor

from .errors import WeightsMismatchError

__all__ = ["CHUNK_BYTES", "copy_chunked"]

#: Largest slice a chunked copy moves (and converts) at once.
CHUNK_BYTES = 32 << 20


def copy_chunked(dst: Tensor, src: Tensor, chunk_bytes: int | None = None) -> Tensor:
    """``dst.copy_(src)`` in slices of at most ``chunk_bytes`` (default :data:`CHUNK_BYTES`).

    Shapes must be equal (no broadcasting). Runs without autograd, so ``dst`` may be a
    parameter. Returns ``dst``.
    """
    if dst.shape != src.shape:
        raise WeightsMismatchError(
            f"copy_chunked: source shape {tuple(src.shape)} differs from destination shape "
            f"{tuple(dst.shape)}; copies do not broadcast here"
        )
    limit = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    per_item = max(dst.element_size(), src.element_size())
    step = max(1, limit // per_item)  # elements per slice
    with torch.no_grad():
        _copy(dst, src, step)
    return dst


def _copy(dst: Tensor, src: Tensor, step: int) -> None:
    n = dst.numel()
    if n <= step:
        dst.copy_(src)
    elif dst.is_contiguous() and src.is_contiguous():
        d, s = dst.view(-1), src.view(-1)
        for i in range(0, n, step):
            d[i : i + step].copy_(s[i : i + step])
    else:  # strided: slice whole rows, and go one level down when one row is too big
        row = n // dst.shape[0]
        rows = step // row
        if rows == 0:
            for i in range(dst.shape[0]):
                _copy(dst[i], src[i], step)
        else:
            for i in range(0, dst.shape[0], rows):
                dst[i : i + rows].copy_(src[i : i + rows])
