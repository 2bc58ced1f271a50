"""Lazy shape views of a ``TensorDict``, under tensordict's lazy-legacy mode.

With ``set_lazy_legacy(True)`` (``_core/lazy_legacy.py``), ``td.permute(...)``,
``transpose``, ``unsqueeze``, ``squeeze`` and ``view`` of a ``TensorDict`` give a
``ShapeView``:

- its entries are computed from the source's on each read, so a key the source
  gains later shows up here too, and each tensor is a view of the source's;
- a write (``set``, ``td[key] = v``, ``update``, a new nested key) goes through the
  inverse op into the source; in-place writes (``set_``, ``td[idx] = ...``) land in
  the shared storage;
- the inverse op gives the source itself (``td.unsqueeze(1).squeeze(1) is td``), and
  an op that changes nothing gives the container itself;
- every other operation gives a plain ``TensorDict``; lock state is the source's.

>>> import torch
>>> from tensorbox import TensorDict, set_lazy_legacy
>>> td = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
>>> with set_lazy_legacy(True):
...     p = td.permute(1, 0)
...     p.set("b", torch.arange(6.0).reshape(3, 2))
...     back = p.permute(1, 0)
...     other = p.permute(0, 1)
ShapeView(...)
>>> td["b"].tolist(), back is td, other is p
([[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]], True, True)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tensorbox._core import shapeops as _shapeops
from tensorbox._core.entries import prepare_entry
from tensorbox._core.lazy_legacy import suspended
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.shape import check_dim, shape_from_args
from tensorbox._core.tensordict import TensorDict
from tensorbox._core.tree import new_plain
from tensorbox._core.viewentries import DenseResults, FixedBatch, SourceLock, ViewEntries
from tensorbox.errors import TensorDictKeyError

__all__ = ["ShapeView", "legacy_op"]

_NTD = NonTensorData
_new = object.__new__


class ShapeView(DenseResults, FixedBatch, SourceLock, TensorDict):
    """``source`` seen through one batch-shape op (see the module doc).

    ``op`` is ``"permute"`` (``args``: the dims), ``"transpose"`` (the two dims),
    ``"unsqueeze"``/``"squeeze"`` (the dim) or ``"view"`` (the new batch size);
    dims are non-negative.
    """

    __slots__ = ("_args", "_op", "_source")

    _source: Any
    _op: str
    _args: tuple[int, ...]

    @classmethod
    def _make(cls, source: Any, op: str, args: tuple[int, ...], batch_size: torch.Size) -> Any:
        self = _new(cls)
        self._source = source
        self._op = op
        self._args = args
        self._batch_size = batch_size
        self._device = source._device
        return self

    # ------------------------------------------------------------------ the op

    def _fwd(self, x: Any) -> Any:
        """``x`` (an entry of the source: leading dims its batch dims) through the op."""
        op, a, nd = self._op, self._args, len(self._source._batch_size)
        if op == "permute":
            return x.permute(*a, *range(nd, x.ndim))
        if op == "transpose":
            return x.transpose(*a)
        if op == "view":
            return x.view(*a, *x.shape[nd:])
        return getattr(x, op)(a[0])

    def _inv(self, x: Any) -> Any:
        """``x`` (a value at this view's level) through the inverse op."""
        op, a, nd = self._op, self._args, len(self._batch_size)
        if op == "permute":
            inverse = sorted(range(nd), key=a.__getitem__)
            return x.permute(*inverse, *range(nd, x.ndim))
        if op == "transpose":
            return x.transpose(*a)
        if op == "view":
            return x.reshape(*self._source._batch_size, *x.shape[nd:])
        return x.squeeze(a[0]) if op == "unsqueeze" else x.unsqueeze(a[0])

    def _nested(self, v: Any) -> Any:
        """A nested container of the source, seen through the same op (lazily)."""
        op, a, nd = self._op, self._args, len(self._source._batch_size)
        extra = tuple(v._batch_size[nd:])
        if op == "permute":
            args: tuple[int, ...] = (*a, *range(nd, nd + len(extra)))
        elif op == "view":
            args = (*a, *extra)
        else:
            args = a
        bs = torch.Size((*self._batch_size, *extra))
        return ShapeView._make(v, op, args, bs)

    @property
    def _tensordict(self) -> dict[str, Any]:  # type: ignore[override]
        out = ViewEntries()
        out.view = self
        put = dict.__setitem__
        with suspended():
            for k, v in self._source._tensordict.items():
                if isinstance(v, TensorDict) and type(v) in _VIEWABLE:
                    put(out, k, self._nested(v))
                elif type(v) is _NTD:
                    put(out, k, v.map_batch(self._fwd))
                else:
                    put(out, k, self._fwd(v))
        return out

    # ------------------------------------------------------------- lock, shape

    def _del_entry(self, key: str) -> None:
        self._source.del_(key)

    def _set_lock(self, flag: bool) -> None:
        self._source._set_lock(flag)

    def _fixed_batch_message(self) -> str:
        return (
            f"cannot set the batch size of a lazy {self._op} view of a TensorDict: call "
            "to_tensordict() first and set it on the copy"
        )

    # ------------------------------------------------------------------ writes

    def _set_str(self, key: str, value: Any, path: tuple[str, ...]) -> None:
        entry = prepare_entry(self, key, value, path)  # checked against this view's shape
        with suspended():
            if type(entry) is _NTD:
                entry = entry.map_batch(self._inv)
            elif isinstance(entry, Tensor) or hasattr(entry, "_tensordict"):
                entry = self._inv(entry)
        self._source._set_str(key, entry, path)

    def _node_for(self, path: tuple[str, ...]) -> Any:
        # a level created here lives in the source: read it back through the view
        node: Any = self
        for i, part in enumerate(path[:-1]):
            nxt = node._tensordict.get(part)
            if nxt is None:
                node._set_str(part, new_plain({}, node._batch_size, node._device), path[: i + 1])
                nxt = node._tensordict[part]
            elif isinstance(nxt, Tensor) or type(nxt) is _NTD:
                raise TensorDictKeyError(
                    f"cannot set {format_key(path)}: {format_key(path[: i + 1])} is a leaf, "
                    "not a TensorDict"
                )
            node = nxt
        return node

    def get_parent_tensordict(self) -> Any:
        """The container this view reads."""
        return self._source

    def to_tensordict(self, *, retain_none: Any = None) -> TensorDict:
        """A plain TensorDict holding a copy of the view's entries."""
        out: TensorDict = self.clone()
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return self.to_tensordict().__reduce__()


_VIEWABLE: tuple[type, ...] = (TensorDict, ShapeView)


def legacy_op(td: Any, op: str, args: tuple[Any, ...]) -> Any:
    """``td.<op>(*args)`` in lazy-legacy mode: a ``ShapeView``, the source when the op
    undoes ``td``'s own, ``td`` when it changes nothing; None for a container that has
    no lazy view (it then takes the plain op)."""
    if type(td) not in _VIEWABLE:
        return None
    bs = td._batch_size
    nd = len(bs)
    view = type(td) is ShapeView
    with suspended():  # the plain op checks the arguments and gives the new batch size
        if op == "squeeze" and args[0] is None:
            ones = [i for i, s in enumerate(bs) if s == 1]
            out = td
            for i, d in enumerate(ones):  # one dim at a time, as tensordict's views
                out = legacy_op(out, "squeeze", (d - i,))
            return out
        new_bs = getattr(_shapeops, op if op != "view" else "reshape")(
            td, *((args, "view") if op == "view" else (args,) if op == "permute" else args)
        )._batch_size
    if op == "permute":
        dims = tuple(d % nd for d in shape_from_args(args))
        if dims == tuple(range(nd)):
            return td
        if view and td._op == "permute" and all(td._args[q] == j for j, q in enumerate(dims)):
            return td._source
        return ShapeView._make(td, op, dims, new_bs)
    if op == "transpose":
        a, b = check_dim(args[0], nd), check_dim(args[1], nd)
        if a == b:
            return td
        if view and td._op == "transpose" and {a, b} == set(td._args):
            return td._source
        return ShapeView._make(td, op, (a, b), new_bs)
    if op == "view":
        if new_bs == bs:
            return td
        if view and td._op == "view" and new_bs == td._source._batch_size:
            return td._source
        return ShapeView._make(td, op, tuple(new_bs), new_bs)
    if op == "unsqueeze":
        d = check_dim(args[0], nd + 1)
        if view and td._op == "squeeze" and td._args == (d,):
            return td._source
        return ShapeView._make(td, op, (d,), new_bs)
    # squeeze of one dim
    d = check_dim(args[0], nd)
    if bs[d] != 1:
        return td
    if view and td._op == "unsqueeze" and td._args == (d,):
        return td._source
    return ShapeView._make(td, op, (d,), new_bs)
