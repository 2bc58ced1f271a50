"""Elementwise operations between containers: comparisons, arithmetic, bool reductions.

``td == other`` gives a TensorDict of bool tensors with the same structure;
``.all()`` / ``.any()`` reduce it to a Python bool. A non-tensor value compares
element by element (one bool per batch element).

>>> import torch
>>> from tensorbox import TensorDict
>>> a = TensorDict(x=torch.arange(3), tag="a", batch_size=[3])
>>> (a == a.clone()).all(), (a != a).any()
(True, False)
>>> (a == 1)["x"].tolist()
[False, True, False]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core import jagged as _jagged
from tensorbox._core.apply import apply
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.shape import check_dim
from tensorbox._core.tree import KEEP, is_coll, tensor_leaves
from tensorbox.errors import TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.methods.base import MixinBase

__all__ = ["binary", "compare", "reduce_bool"]

_NTD = NonTensorData
_NJT = _jagged.NJT


def compare(td: MixinBase, other: Any, op: Callable[..., Tensor]) -> Any:
    """``op`` (``torch.eq`` or ``torch.ne``) leaf by leaf; ``other`` is a container with
    the same keys, a mapping, or a scalar/tensor compared with every tensor leaf."""
    if is_coll(other) or isinstance(other, Mapping):
        ostore = other if isinstance(other, Mapping) else other._tensordict
        store = td._tensordict
        if isinstance(other, Mapping) and None in ostore.values():
            # A None value is no entry (a tensorclass field set to None has none).
            ostore = {k: v for k, v in ostore.items() if v is not None}
        if store.keys() != ostore.keys():
            missing = sorted(set(store) - set(ostore))
            extra = sorted(set(ostore) - set(store))
            raise TensorDictKeyError(
                f"cannot compare TensorDicts with different keys (missing {missing!r}, "
                f"unexpected {extra!r})"
            )
        out: dict[str, Any] = {}
        for k, v in store.items():
            o = ostore[k]
            if type(v) is _NJT:  # row lengths, then values
                out[k] = _jagged.compare(v, o, op)
            elif isinstance(v, Tensor):
                out[k] = op(v, o) if type(o) is not _NTD else _tensor_vs_value(v, o, op)
            elif type(v) is _NTD:
                if isinstance(o, Tensor):
                    out[k] = _tensor_vs_value(o, v, op)
                else:
                    out[k] = _compare_nontensor(td, v, o, op)
            else:
                out[k] = compare(v, o, op)
        return td._new_unsafe(out, td._batch_size, td._device)
    if not isinstance(other, (Tensor, int, float, bool, complex, np.ndarray, np.generic)):
        return NotImplemented
    res = {
        k: (op(v, other) if isinstance(v, Tensor) else compare(v, other, op))
        for k, v in td._tensordict.items()
        if type(v) is not _NTD
    }
    return td._new_unsafe(res, td._batch_size, td._device)


def _compare_nontensor(td: MixinBase, v: NonTensorData, o: Any, op: Any) -> Tensor:
    o = o if type(o) is _NTD else NonTensorData(o)
    bs = td._batch_size
    a, b = v.full(bs), o.full(bs)
    eq = np.array([_eq(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1))], dtype=bool)
    res = torch.from_numpy(eq.reshape(tuple(bs)))
    return res if op is torch.eq else ~res


def _tensor_vs_value(t: Tensor, v: NonTensorData, op: Callable[..., Tensor]) -> Tensor:
    """A tensor leaf against the same key held as a value (``3`` saved from a tensor
    ``tensor(3)``, as ``from_dict(td.to_dict())`` gives): compared as numbers, else unequal."""
    if not v.stacked:
        try:
            return op(t, torch.as_tensor(v.value, device=t.device))
        except (TypeError, ValueError, RuntimeError):
            pass
    unequal = torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    return unequal if op is torch.eq else ~unequal


def _eq(x: Any, y: Any) -> bool:
    try:
        return bool(x == y)
    except Exception:  # an == that returns an array or raises: compare identity
        return x is y


def reduce_bool(td: MixinBase, dim: int | None, fn: Callable[..., Tensor]) -> Any:
    """``all()``/``any()``: a Python bool over every leaf, or per batch element along ``dim``."""
    if dim is None:
        leaves = tensor_leaves(td)
        if fn is torch.all:
            return all(bool(t.all()) for t in leaves)
        return any(bool(t.any()) for t in leaves)
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    new_bs = torch.Size((*bs[:d], *bs[d + 1 :]))
    return apply(td, lambda t: fn(t, dim=d), (), new_bs, KEEP, False, False)


def binary(td: MixinBase, other: Any, op: Callable[..., Tensor]) -> Any:
    """``op`` leaf by leaf with a container/mapping of the same keys, or with a scalar."""
    if is_coll(other) or isinstance(other, Mapping):
        return apply(td, op, (other,), None, KEEP, False, False)
    return apply(td, lambda t: op(t, other), (), None, KEEP, False, False)
