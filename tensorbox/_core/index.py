"""Batch indexing: ``td[index]``, ``td[index] = value`` and the DataLoader's ``__getitems__``.

An index addresses batch dims only, with torch's semantics. The common cases
take a short path: an ``int`` or a ``slice`` is applied to each leaf and the new
batch size is computed directly; a 1-D integer tensor (or list) and a 1-D bool
mask over the first batch dim become one ``index_select`` per leaf, which is
cheaper than advanced indexing. Everything else is normalised once (``...``
expanded over the batch dims so it never reaches a feature dim) and applied to
every leaf; the batch size is then read off one indexed leaf.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(x=torch.arange(12).reshape(4, 3), batch_size=[4])
>>> td[torch.tensor([3, -1])]["x"].tolist()
[[9, 10, 11], [9, 10, 11]]
>>> td[..., None].batch_size
torch.Size([4, 1])
>>> td[torch.tensor([True, False, True, False])] = 0
>>> td["x"][:, 0].tolist()
[0, 3, 0, 9]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core import jagged as _jagged
from tensorbox._core.jagged_gather import as_rows
from tensorbox._core.nontensor import NonTensorData, cpu_index, per_row
from tensorbox._core.row_keys import create_missing
from tensorbox._core.shape import normalize_index
from tensorbox._core.tree import KEEP
from tensorbox.errors import BatchDimError, BatchSizeError, TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = ["batch_after_index", "gather_rows", "getitem", "setitem_batch"]

_Size = torch.Size
_NTD = NonTensorData
_NJT = _jagged.NJT
_long = torch.int64
_int = torch.int32
_bool = torch.bool


def getitem(td: TensorCollection, index: Any) -> Any:
    """``td[index]`` for a batch index (keys were handled by the caller)."""
    t = type(index)
    bs = td._batch_size
    if t is int:
        if not bs:
            raise _no_batch_dims(index)
        n = bs[0]
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for batch_size {tuple(bs)}")
        # torch's own row of a jagged leaf unbinds every row first: take it from values.
        out = {
            k: v[index] if type(v) is not _NJT else _jagged.select_rows(v, index)
            for k, v in td._tensordict.items()
        }
        return td._new_unsafe(out, bs[1:], td._device)
    if t is slice:
        if not bs:
            raise _no_batch_dims(index)
        if index.step is not None and index.step <= 0:
            raise ValueError(f"slice step must be positive (as in torch), got {index!r}")
        size = len(range(*index.indices(bs[0])))
        try:
            out = {k: v[index] for k, v in td._tensordict.items()}
        except RuntimeError:  # torch does not slice a jagged leaf along dim 0
            if _jagged.find_jagged(td) is None:
                raise
            return _jagged.getitem(td, index)
        return td._new_unsafe(out, _Size((size, *bs[1:])), td._device)
    if isinstance(index, Tensor):
        if index.ndim == 1 and bs:
            dt = index.dtype
            # Only a CPU index: there index_select raises on a negative or out-of-range
            # entry (and we fall back); on CUDA it would trip a device-side assert.
            if (dt is _long or dt is _int) and index.is_cpu:
                out = _take(td, index)
                if out is not None:
                    return out
            elif dt is _bool and index.shape[0] == bs[0]:
                # nonzero() gives in-range, non-negative rows: safe on every device.
                out = _take(td, index.nonzero().view(-1))
                if out is not None:
                    return out
    elif t is list or t is range:
        return getitem(td, as_index(index))
    elif t is tuple:
        if index and type(index[0]) is tuple and all(isinstance(p, (str, tuple)) for p in index):
            return td.get(index, KEEP)  # a key with nested tuples: ((a, b), c)
        _check_no_keys(index)
    return _generic(td, index)


def _take(td: TensorCollection, idx: Tensor) -> Any:
    """One ``index_select`` per leaf along dim 0, or None when that does not apply
    (negative or out-of-range entries, leaves on another device): the general
    path then gives torch's result or torch's error."""
    out: dict[str, Any] = {}
    select = torch.index_select
    try:
        for k, v in td._tensordict.items():
            if type(v) is _NJT:  # a jagged leaf: rows gathered over its values and offsets
                return _jagged.take(td, idx, out)
            out[k] = select(v, 0, idx) if isinstance(v, Tensor) else v[idx]
    except (IndexError, RuntimeError):
        return None
    bs = td._batch_size
    return td._new_unsafe(out, _Size((idx.shape[0], *bs[1:])), td._device)


def _generic(td: TensorCollection, index: Any) -> Any:
    if len(td._batch_size) == 1 and _jagged.find_jagged(td) is not None:
        return _jagged.getitem(td, index)
    index = normalize_index(index, len(td._batch_size))
    out = {k: v[index] for k, v in td._tensordict.items()}
    return td._new_unsafe(out, batch_after_index(td, out, index), td._device)


def _no_batch_dims(index: Any) -> BatchDimError:
    # an IndexError as torch's, and the RuntimeError tensordict raises
    return BatchDimError(
        f"cannot index a TensorDict with batch_size [] by {index!r}: it has no batch dims "
        "(look up a key with td['key'], or add a dim with td[None])"
    )


def _check_no_keys(index: tuple[Any, ...]) -> None:
    for part in index:
        if type(part) is str or isinstance(part, str):
            keys = tuple(p for p in index if isinstance(p, str))
            raise TensorDictKeyError(
                f"index {index!r} mixes keys and batch indices; look the key up first, "
                f"then index the result: td[{keys if len(keys) > 1 else keys[0]!r}][...]"
            )


def as_index(index: list[Any] | range) -> Any:
    """A list or range index as a tensor (an empty list means no rows, as in torch)."""
    if type(index) is range:
        return torch.arange(index.start, index.stop, index.step)
    if not index:
        return torch.empty(0, dtype=_long)
    try:
        return torch.tensor(index)
    except (TypeError, ValueError, RuntimeError):
        return tuple(index)  # a list of slices/tensors: torch's old tuple meaning


def batch_after_index(td: TensorCollection, out: dict[str, Any], index: Any) -> torch.Size:
    """The batch size of ``td[index]``, read off one indexed entry when there is one."""
    bd = len(td._batch_size)
    for k, v in td._tensordict.items():
        if type(v) is not _NTD:
            r: Tensor = out[k]
            return r.shape[: r.ndim - (v.ndim - bd)]
    for v in out.values():
        if v.stacked:
            return _Size(v.data.shape)
    # No entry tells us: index a stride-0 stand-in that costs no memory.
    return torch.empty(()).expand(td._batch_size)[cpu_index(index)].shape


def gather_rows(td: TensorCollection, indices: Sequence[int] | Tensor) -> Any:
    """``td[indices]`` for a 1-D list of row numbers: what DataLoader's fetcher passes
    to ``__getitems__``; one ``index_select`` per leaf."""
    if not td._batch_size:
        raise _no_batch_dims(indices)
    idx = indices if isinstance(indices, Tensor) else as_rows(indices)
    return getitem(td, idx)


def setitem_batch(td: TensorCollection, index: Any, value: Any) -> None:
    """``td[index] = value``: write in place into the selected rows of every leaf."""
    if type(index) is list or type(index) is range:
        index = as_index(index)
    elif type(index) is tuple:
        _check_no_keys(index)
    index = normalize_index(index, len(td._batch_size))
    store: Mapping[str, Any] | None = None
    if getattr(type(value), "_is_tensor_collection", False):
        store = value._tensordict  # first: a TensorDict is a Mapping too
    elif isinstance(value, Mapping):
        store = value
    if store is not None:
        create_missing(td, store, index)  # keys `td` lacks: made whole, then written
        for k, v in store.items():
            _write_rows(td, k, td._tensordict[k], index, v)
        return
    for k, cur in td._tensordict.items():
        if type(cur) is not _NTD:
            _write_rows(td, k, cur, index, value)


def _write_rows(td: TensorCollection, key: str, cur: Any, index: Any, value: Any) -> None:
    if type(cur) is _jagged.NJT:
        _jagged.write_rows(cur, index, value, key)
    elif isinstance(cur, Tensor):
        if type(value) is _NTD or isinstance(value, str):
            shown = value.value if type(value) is _NTD else value
            raise TypeError(f"cannot write the non-tensor value {shown!r} into tensor {key!r}")
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        try:
            cur[index] = value
        except RuntimeError as err:
            raise BatchSizeError(f"cannot write into key {key!r}: {err}") from None
    elif type(cur) is _NTD:
        new = value if type(value) is _NTD else NonTensorData(value)
        if not cur.stacked and not new.stacked and cur == new:
            return
        full = cur.full(td._batch_size).copy()
        pos = torch.arange(full.size).reshape(full.shape)[cpu_index(index)].numpy()
        flat = full.reshape(-1)
        vals = new.full(pos.shape)
        for p, val in zip(pos.reshape(-1), vals.reshape(-1)):
            flat[p] = val
        td._tensordict[key] = per_row(full)
    else:
        try:
            cur[index] = value
        except BatchSizeError as err:
            raise BatchSizeError(f"under {key!r}: {err}") from None
