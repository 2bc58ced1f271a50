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

__all__ = ["binary", "compare", "logical", "reduce_bool"]

_NTD = NonTensorData
_NJT = _jagged.NJT


def compare(td: MixinBase, other: Any, op: Callable[..., Tensor]) -> Any:
    """``op`` (``torch.eq`` or ``torch.ne``) leaf by leaf; ``other`` is a container with
    the same keys, a mapping, or a scalar/tensor compared with every tensor leaf."""
    if is_coll(other) or isinstance(other, Mapping):
        ostore: Mapping[str, Any] = other if isinstance(other, Mapping) else other._tensordict
        store: Mapping[str, Any] = td._tensordict
        if isinstance(other, Mapping) and None in ostore.values():
            # A None value is no entry (a tensorclass field set to None has none).
            ostore = {k: v for k, v in ostore.items() if v is not None}
        if store.keys() != ostore.keys():
            # A tensorclass field set to None is no entry, while TensorDict(tc.to_dict())
            # holds the None: the two are the same value.
            store = _without_nones(store, ostore, getattr(other, "__tc_names__", ()))
            ostore = _without_nones(ostore, store, getattr(td, "__tc_names__", ()))
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


def _without_nones(
    store: Mapping[str, Any], other: Mapping[str, Any], fields: Any
) -> Mapping[str, Any]:
    """``store`` less its None values (as ``NonTensorData``) under the tensorclass field
    names ``fields`` that ``other`` (that tensorclass's entries) lacks."""
    drop = [
        k
        for k, v in store.items()
        if k in fields and k not in other and type(v) is _NTD and not v.stacked and v.data is None
    ]
    return {k: v for k, v in store.items() if k not in drop} if drop else store


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


def logical(td: MixinBase, other: Any, op: Callable[..., Tensor], sym: str) -> Any:
    """``td | other`` / ``td ^ other``: ``op`` on the tensor leaves, and the operator
    ``sym`` on two non-tensor values under the same key, as tensordict does: one bool per
    batch element (``True ^ True`` is ``tensor(False)``, never the left value unchanged).
    Equal values without the operator (a string tag) stay as they are.

    >>> from tensorbox import TensorDict, NonTensorData
    >>> td = TensorDict(flag=NonTensorData(True), x=torch.ones(2), batch_size=[2])
    >>> (td ^ td)["flag"].tolist(), (td | td)["flag"].tolist()
    ([False, False], [True, True])
    """
    out = binary(td, other, op)
    if is_coll(other):
        _values_op(out, td, other, _PYOPS[sym], sym, ())
    return out


_PYOPS: dict[str, Callable[[Any, Any], Any]] = {
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
}


def _values_op(
    out: Any, td: Any, other: Any, pyop: Callable[[Any, Any], Any], sym: str, path: tuple[str, ...]
) -> None:
    """Replace, in the fresh result ``out``, each non-tensor value of ``td`` that faces a
    non-tensor value in ``other`` by ``pyop`` of the two (a bool tensor shaped like the
    batch)."""
    ostore = other._tensordict
    res = out._tensordict
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor) or k not in res:
            continue
        o = ostore.get(k)
        if type(v) is _NTD:
            if type(o) is _NTD:
                res[k] = _value_op(v, o, pyop, sym, td, (*path, k))
        elif o is not None and not isinstance(o, Tensor) and type(o) is not _NTD:
            _values_op(res[k], v, o, pyop, sym, (*path, k))


def _value_op(
    v: NonTensorData,
    o: NonTensorData,
    pyop: Callable[[Any, Any], Any],
    sym: str,
    td: Any,
    path: tuple[str, ...],
) -> Tensor | NonTensorData:
    """``pyop`` of two values as one bool per batch element. Values without the operator
    (strings: a tag beside masks) stay as they are when equal on both sides (tensordict
    raises), and are refused when they differ (keeping either would drop the other)."""
    bs = td._batch_size

    def one(a: Any, b: Any) -> Any:
        try:
            return pyop(a, b)
        except TypeError:
            if _eq(a, b):
                return _UNDEFINED
            raise TypeError(
                f"{sym} of two containers: key {path!r} holds the values {a!r} and {b!r}, "
                f"and {type(a).__name__} {sym} {type(b).__name__} is not defined"
            ) from None

    if not (v.stacked or o.stacked):
        val = one(v.data, o.data)
        if val is _UNDEFINED:
            return v
        if isinstance(val, Tensor):
            return val
        if isinstance(val, np.ndarray):
            return torch.as_tensor(val, device=td._device)
        return torch.full(tuple(bs), bool(val), device=td._device)
    a, b = v.full(bs), o.full(bs)
    vals = [one(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1))]
    undefined = sum(r is _UNDEFINED for r in vals)
    if undefined == len(vals):
        return v
    if undefined:
        raise TypeError(
            f"{sym} of two containers: key {path!r} holds values some of which have no "
            f"{sym} (they are kept only when every element lacks it)"
        )
    flat = [bool(r) for r in vals]
    return torch.tensor(flat, dtype=torch.bool, device=td._device).reshape(tuple(bs))


_UNDEFINED = object()
