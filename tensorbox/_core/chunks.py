"""Bounded copies: move a large tensor in slices so no temporary exceeds one chunk.

A copy that converts dtype, crosses devices or reads a memory-mapped file
materializes its source in the destination's format. Doing it in slices of at
most :data:`CHUNK_BYTES` bounds that temporary (and the pages faulted in at once)
whatever the tensor's size. In-place writes into containers (``set_``,
``update_``), weight loading (``to_module(inplace=True)``, ``load_state_dict``)
and file writes (:func:`byte_chunks`) all use this one constant.

>>> import torch
>>> dst = torch.empty(1000, 3)
>>> copy_chunked(dst, torch.ones(1000, 3, dtype=torch.float64), chunk_bytes=256).sum().item()
3000.0
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from tensorbox.errors import WeightsMismatchError

__all__ = ["CHUNK_BYTES", "as_bytes", "byte_chunks", "copy_chunked"]

CHUNK_BYTES = 32 << 20
"""Largest slice (32 MiB) a chunked copy moves, and converts, at once.

Small enough that the temporary of a dtype-converting copy and the pages faulted in at
once stay bounded, large enough that the per-slice overhead is lost in the copy itself.
"""


def copy_chunked(dst: Tensor, src: Tensor, chunk_bytes: int | None = None) -> Tensor:
    """``dst.copy_(src)`` in slices of at most ``chunk_bytes`` (default :data:`CHUNK_BYTES`).

    Shapes must be equal (no broadcasting). Runs without autograd, so ``dst`` may be a
    parameter. Returns ``dst``.

    >>> import torch; from tensorbox.weights import copy_chunked
    >>> dst = torch.zeros(1000, 4)
    >>> copy_chunked(dst, torch.ones(1000, 4, dtype=torch.float64), chunk_bytes=4096).sum().item()
    4000.0
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


# ---------------------------------------------------------------- file writes


def _pieces(t: Tensor) -> Iterator[Tensor]:
    """``t`` cut along its leading dims into C-ordered pieces of at most CHUNK_BYTES."""
    nbytes = t.numel() * t.element_size()
    if t.dim() == 0 or nbytes <= CHUNK_BYTES:
        yield t
        return
    row = nbytes // t.shape[0]
    if row > CHUNK_BYTES:
        for i in range(t.shape[0]):
            yield from _pieces(t[i])
    else:
        step = CHUNK_BYTES // row
        for i in range(0, t.shape[0], step):
            yield t[i : i + step]


def as_bytes(t: Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without copying."""
    flat = t.reshape(-1)
    if flat.stride(0) != 1:  # one element with a stray stride still counts as contiguous
        flat = flat.clone(memory_format=torch.contiguous_format)
    return memoryview(flat.view(torch.uint8).numpy())  # type: ignore[arg-type]  # numpy's stubs: no Buffer before 3.12


def byte_chunks(t: Tensor) -> Iterator[memoryview]:
    """The bytes of ``t`` in C order, as few views as possible, copies bounded by CHUNK_BYTES."""
    if t.layout is not torch.strided or t.is_nested:
        raise TypeError(f"cannot write a {t.layout} tensor to a file: only dense tensors")
    t = t.detach()
    if t.device.type == "cpu" and t.is_contiguous() and not (t.is_conj() or t.is_neg()):
        yield as_bytes(t)
        return
    for piece in _pieces(t):
        yield as_bytes(piece.cpu().contiguous().resolve_conj().resolve_neg())
