"""Gathering rows of a jagged leaf: as new values and offsets, or straight into padding.

Rows ``idx`` of a jagged leaf (``values`` and ``offsets``, ``offsets[0] == 0``) are
read with one gather from the values: each value to read sits at its row's start plus
its place in the row. On the CPU the positions are computed with numpy, whose ops on
batch-sized arrays cost a tenth of torch's dispatch, and whose ``repeat`` does not
take torch's intra-op thread pool (torch 2.13's CPU ``repeat_interleave`` can hang in
a child forked after its parent used several threads). Elsewhere (CUDA), or where
autograd must see the gather, the same steps run in torch.

:func:`gather_padded` writes the rows straight into a ``[rows, longest, *feature]``
tensor filled with the padding: no intermediate jagged values, no nested tensor.

>>> import torch
>>> values, offsets = torch.arange(6), torch.tensor([0, 2, 2, 6])
>>> v, o, seqlens = gather(values, offsets, torch.tensor([2, 0, 1]))
>>> v.tolist(), o.tolist(), seqlens
([2, 3, 4, 5, 0, 1], [0, 4, 6, 6], (0, 4))
>>> gather_padded(values, offsets, torch.tensor([1, 0]), -1)[0].tolist()
[[-1, -1], [0, 1]]
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["as_rows", "gather", "gather_padded", "pad_parts", "positions"]

_long = torch.int64

#: dtypes numpy holds as they are; any other (bfloat16, float8...) is gathered as the
#: integer dtype of its width and viewed back.
_NUMPY_OK_TEXT = "bool uint8 int8 int16 int32 int64 float16 float32 float64 complex64 complex128"
_NUMPY_OK = frozenset(getattr(torch, name) for name in _NUMPY_OK_TEXT.split())
_SAME_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_as_numpy = torch.Tensor.numpy  # the plain method: a memory-mapped subclass maps the same


def _np(t: Tensor) -> Any:
    """``t`` as a numpy array sharing its memory, or None where a gather through numpy
    would lose something: another device, autograd, a lazy conjugate or negation, an
    active torch mode, a dtype with no integer of its width."""
    if t.device.type != "cpu" or t.requires_grad or t.is_conj() or t.is_neg():
        return None
    if _dispatch_modes() or _function_modes():
        return None  # a mode (fake tensors, tracing, counting) must see torch's ops
    if t.dtype not in _NUMPY_OK:
        alias = _SAME_WIDTH.get(t.element_size())
        if alias is None:
            return None
        t = t.view(alias)
    return _as_numpy(t)


def as_rows(index: Sequence[Any]) -> Tensor:
    """A list (or range) of row numbers as a 1-D int64 tensor, as
    ``torch.as_tensor(index, dtype=torch.int64)``; a list of Python ints (what a
    DataLoader's sampler gives) goes through numpy, four times faster."""
    if not len(index):
        return torch.empty(0, dtype=_long)
    if type(index) is list:
        a = np.asarray(index)
        if a.ndim == 1 and a.dtype.kind in "iu" and a.dtype != np.uint64:
            return torch.from_numpy(a.astype(np.int64, copy=False))
    return torch.as_tensor(index, dtype=_long)


def _from_np(a: Any, dtype: torch.dtype) -> Tensor:
    out = torch.from_numpy(a)
    return out if out.dtype is dtype else out.view(dtype)


def _np_rows(offsets: Any, idx: Tensor) -> tuple[Any, Any, Any]:
    """``(starts, lengths, new_offsets)`` of rows ``idx``, in numpy (int64 offsets)."""
    ix = _as_numpy(idx.cpu()) if idx.device.type != "cpu" else _as_numpy(idx)
    starts = offsets[ix]
    lengths = offsets[ix + 1] - starts
    new = np.empty(ix.shape[0] + 1, dtype=np.int64)
    new[0] = 0
    np.cumsum(lengths, out=new[1:])
    return starts, lengths, new


def positions(starts: Tensor, lengths: Tensor) -> Tensor:
    """Every position ``starts[i] + j`` for ``j < lengths[i]``, rows in order (int64):
    the values rows ``i`` span, back to back."""
    if starts.device.type == "cpu" and not (_dispatch_modes() or _function_modes()):
        s, n = _as_numpy(starts).astype(np.int64), _as_numpy(lengths)
        if not s.shape[0]:
            return torch.empty(0, dtype=_long)
        ends = np.cumsum(n)
        pos = np.repeat(s - (ends - n), n)
        pos += np.arange(pos.shape[0])
        return torch.from_numpy(pos)
    lengths = lengths.to(_long)
    new = torch.zeros(lengths.shape[0] + 1, dtype=_long, device=lengths.device)
    torch.cumsum(lengths, 0, out=new[1:])
    total = int(new[-1])
    shift = torch.repeat_interleave(starts.to(_long) - new[:-1], lengths, output_size=total)
    return shift + torch.arange(total, device=lengths.device)


def gather(
    values: Tensor, offsets: Tensor, idx: Tensor
) -> tuple[Tensor, Tensor, tuple[int, int] | None]:
    """``(values, offsets, (shortest, longest))`` of rows ``idx`` (in range, not
    negative, int64): the values copied once, the offsets in ``offsets``' dtype.
    ``seqlens`` is None for no rows."""
    vn = _np(values)
    on = _np(offsets)
    if vn is not None and on is not None:
        starts, lengths, new = _np_rows(on, idx)
        pos = np.repeat(starts - new[:-1], lengths)
        pos += np.arange(pos.shape[0])
        out = _from_np(vn.take(pos, axis=0), values.dtype)
        seqlens = (int(lengths.min()), int(lengths.max())) if lengths.shape[0] else None
        return out, _from_np(new.astype(on.dtype, copy=False), offsets.dtype), seqlens
    dev = offsets.device
    idx = idx.to(dev)
    starts_t = offsets.index_select(0, idx).to(_long)
    lengths_t = offsets.index_select(0, idx + 1).to(_long) - starts_t
    new_t = torch.zeros(idx.shape[0] + 1, dtype=_long, device=dev)
    torch.cumsum(lengths_t, 0, out=new_t[1:])
    total = int(new_t[-1])
    # Each row's start, shifted by its place in the output, plus a running count.
    shift = torch.repeat_interleave(starts_t - new_t[:-1], lengths_t, output_size=total)
    pos_t = shift + torch.arange(total, device=dev)
    out_t = values.index_select(0, pos_t.to(values.device))
    seqlens = None
    if lengths_t.numel():
        lo, hi = torch.aminmax(lengths_t)
        seqlens = int(lo), int(hi)
    return out_t, new_t.to(offsets.dtype), seqlens


def gather_padded(
    values: Tensor, offsets: Tensor, idx: Tensor, padding: float = 0
) -> tuple[Tensor, Tensor]:
    """``(padded, lengths)`` for rows ``idx`` (in range, not negative, int64):
    ``padded[i, :lengths[i]]`` is row ``idx[i]``, the rest ``padding``; ``padded`` is
    ``[len(idx), longest of them, *feature]``, ``lengths`` int64."""
    vn = _np(values)
    on = _np(offsets)
    feature = tuple(values.shape[1:])
    if vn is not None and on is not None:
        starts, lengths, new = _np_rows(on, idx)
        rows = lengths.shape[0]
        longest = int(lengths.max()) if rows else 0
        base = np.arange(0, rows * longest, longest) if longest else np.zeros(rows, np.int64)
        step = np.arange(int(new[-1]))
        src = np.repeat(starts - new[:-1], lengths)
        src += step
        dst = np.repeat(base - new[:-1], lengths)
        dst += step
        out = np.full((rows, longest, *feature), _fill(padding, values.dtype), dtype=vn.dtype)
        out.reshape(rows * longest, *feature)[dst] = vn.take(src, axis=0)
        return _from_np(out, values.dtype), torch.from_numpy(lengths.astype(np.int64))
    idx = idx.to(offsets.device)
    starts_t = offsets.index_select(0, idx).to(_long)
    lengths_t = offsets.index_select(0, idx + 1).to(_long) - starts_t
    longest = int(lengths_t.max()) if lengths_t.numel() else 0
    step_t = torch.arange(longest, device=offsets.device)
    where = starts_t[:, None] + step_t
    if values.shape[0]:
        where.clamp_(max=values.shape[0] - 1)  # past a row's end: read anything, padded over
    out_t = values.index_select(0, where.view(-1).to(values.device))
    out_t = out_t.view(idx.shape[0], longest, *feature)
    pad_mask = (step_t >= lengths_t[:, None]).to(values.device)
    out_t = out_t.masked_fill(pad_mask.view(*pad_mask.shape, *(1,) * len(feature)), padding)
    return out_t, lengths_t


def pad_parts(values: Tensor, offsets: Tensor, padding: float = 0) -> tuple[Tensor, Tensor]:
    """``(padded, lengths)`` of every row of ``values`` and ``offsets`` (offsets[0] is
    0), as :func:`gather_padded` of all rows: the values, already in row order, are
    scattered once into the padding."""
    vn = _np(values)
    on = _np(offsets)
    if vn is None or on is None:
        rows_t = torch.arange(offsets.shape[0] - 1, device=offsets.device)
        return gather_padded(values, offsets, rows_t, padding)
    feature = tuple(values.shape[1:])
    lengths = np.diff(on).astype(np.int64, copy=False)
    rows = lengths.shape[0]
    longest = int(lengths.max()) if rows else 0
    out = np.full((rows, longest, *feature), _fill(padding, values.dtype), dtype=vn.dtype)
    total = int(on[-1]) if rows else 0
    if total:
        base = np.arange(0, rows * longest, longest)
        dst = np.repeat(base - on[:-1], lengths)
        dst += np.arange(total)
        out.reshape(rows * longest, *feature)[dst] = vn[:total]
    return _from_np(out, values.dtype), torch.from_numpy(lengths)


@lru_cache(maxsize=64)
def _fill(padding: float, dtype: torch.dtype) -> Any:
    """``padding`` converted as torch converts a fill value to ``dtype``, as the numpy
    scalar ``_np`` gathers that dtype as."""
    return _np(torch.full((1,), padding, dtype=dtype))[0]
