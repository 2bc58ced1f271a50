"""``SubTensorDict``: the rows ``idx`` of a container, as a container whose writes reach it.

``td[idx]`` gives a new container: for an int or a slice its tensors are views of
``td``'s, for a tensor or a mask they are copies, and a key set on it stays there.
``td._get_sub_tensordict(idx)`` (a name from tensordict that user code calls, see
``methods/compat.py``) gives this view instead:

- reads index the source's entries at the time of the read, so a key the source gains
  later shows up here too;
- ``sub[key] = v``, ``set``, ``set_``, ``update`` and ``apply_`` write into the rows
  ``idx`` of the source's entries, whatever the kind of index;
- a new key is created in the source, zeros (or the value, for non-tensor data) in the
  rows outside ``idx``;
- every other operation gives a plain ``TensorDict`` (the view's own batch size cannot
  be set: build one with ``to_tensordict()`` first).

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.zeros(4, 2), batch_size=[4])
>>> sub = td._get_sub_tensordict(torch.tensor([1, 3]))
>>> sub.update({"a": torch.ones(2, 2)})
SubTensorDict(...)
>>> td["a"][:, 0].tolist()
[0.0, 1.0, 0.0, 1.0]
>>> td["b"] = torch.arange(4.0)       # a key the source gains later
>>> sub["b"].tolist()
[1.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import torch
from torch import Tensor

from tensorbox._core import index as _index
from tensorbox._core.nestedkey import NestedKey, format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData, cpu_index
from tensorbox._core.shape import normalize_index
from tensorbox._core.tensordict import TensorDict
from tensorbox._core.tree import KEEP, is_coll, keys_list, store_of
from tensorbox._core.viewentries import DenseResults, FixedBatch, SourceLock, ViewEntries
from tensorbox.errors import BatchSizeError, LockedError

__all__ = ["SubTensorDict"]

_NTD = NonTensorData


class SubTensorDict(DenseResults, FixedBatch, SourceLock, TensorDict):
    """The rows ``idx`` of ``source``, read and written in place (see the module doc)."""

    __slots__ = ("_idx", "_source")

    _source: Any
    _idx: Any

    def __init__(self, source: Any, idx: Any) -> None:
        if type(idx) is list or type(idx) is range:
            idx = _index.as_index(idx)
        bs = source._batch_size
        idx = normalize_index(idx, len(bs))
        self._source = source
        self._idx = idx
        self._batch_size = torch.empty(()).expand(bs)[cpu_index(idx)].shape
        self._device = source._device

    @property
    def idx(self) -> Any:
        """The index of the rows in the source (normalized: ``...`` expanded)."""
        return self._idx

    @property
    def _tensordict(self) -> dict[str, Any]:  # type: ignore[override]
        idx = self._idx
        out = ViewEntries()
        out.view = self
        put = dict.__setitem__
        for k, v in self._source._tensordict.items():
            if type(v) is TensorDict or type(v) is SubTensorDict:
                put(out, k, SubTensorDict(v, idx))
            elif isinstance(v, Tensor) and type(v) is not _index._NJT:
                put(out, k, v[idx])
            else:
                put(out, k, _index.getitem(v, idx) if is_coll(v) else v[idx])
        return out

    def _del_entry(self, key: str) -> None:
        raise RuntimeError(
            f"cannot delete {key!r} from rows of a TensorDict (a sub-TensorDict view): "
            "delete it from the source"
        )

    def _fixed_batch_message(self) -> str:
        return (
            "cannot set the batch size of rows of a TensorDict (a sub-TensorDict view): "
            "call to_tensordict() first and set it on the copy"
        )

    # ------------------------------------------------------------------ writes

    def _set_str(self, key: str, value: Any, path: tuple[str, ...]) -> None:
        src = self._source
        cur = src._tensordict.get(key)
        if cur is None:
            if src._locked:
                raise LockedError(
                    f"cannot set {format_key(path)}: the source of these rows is locked"
                )
            src._set_str(key, self._blank(value, path), path)
            cur = src._tensordict[key]
            if type(cur) is _NTD and not isinstance(value, Tensor) and not is_coll(value):
                return  # a non-tensor value: the whole column holds it already
        if type(src._tensordict) is not dict:
            # the source is a view itself (rows of rows, a lazy stack): its entries are
            # built on read, so read, write these rows, and write the entry back
            rows = src._tensordict[key]
            if isinstance(rows, Tensor):
                rows[self._idx] = value
            else:
                rows[self._idx] = value
                if type(rows) is SubTensorDict:
                    return
            src._set_str(key, rows, path)
            return
        if (type(cur) is TensorDict or type(cur) is SubTensorDict) and (
            is_coll(value) or isinstance(value, Mapping)
        ):
            SubTensorDict(cur, self._idx).update(value)
            return
        _index._write_rows(src, key, cur, self._idx, value)

    def _blank(self, value: Any, path: tuple[str, ...]) -> Any:
        """A value for the whole source under a new key: zeros outside these rows."""
        nb = len(self._batch_size)
        full = tuple(self._source._batch_size)
        if isinstance(value, (bool, int, float)):
            value = torch.as_tensor(value)
        if isinstance(value, Tensor):
            if tuple(value.shape[:nb]) != tuple(self._batch_size):
                raise BatchSizeError(
                    f"cannot set {format_key(path)}: shape {tuple(value.shape)} does not start "
                    f"with the batch size {tuple(self._batch_size)} of these rows"
                )
            return torch.zeros((*full, *value.shape[nb:]), dtype=value.dtype, device=value.device)
        if isinstance(value, Mapping) and not is_coll(value):
            value = TensorDict(dict(value), batch_size=self._batch_size, device=self._device)
        if is_coll(value):
            return _blank_tree(value, full, nb)
        return value  # non-tensor data: one value for every row

    def set(
        self, key: NestedKey, value: Any, inplace: bool = False, *, non_blocking: bool = False
    ) -> Self:
        """Write ``value`` into these rows of a new key of the source (created there).

        An existing key is refused unless ``inplace=True``: a view cannot replace the
        source's entry (write into it with ``set_``, ``sub[key] = v`` or ``update``).
        """
        path = unravel_key(key)
        if not inplace and path in self._source:
            raise RuntimeError(
                f"cannot replace {format_key(path)} through rows of a TensorDict (a "
                "sub-TensorDict view): write into it with set_(), sub[key] = value or "
                "update(), or clone first"
            )
        return self._put(path, value)

    def _put(self, path: tuple[str, ...], value: Any) -> Self:
        node: Any = self
        for i, part in enumerate(path[:-1]):
            nxt = node._tensordict.get(part)
            if nxt is None:
                node._set_str(part, TensorDict(batch_size=node._batch_size), path[: i + 1])
                nxt = node._tensordict[part]
            node = nxt
        if type(node) is SubTensorDict:
            node._set_str(path[-1], value, path)
        else:
            node.set(path[-1], value, inplace=True)
            self._set_str(path[0], self._tensordict[path[0]], path[:1])
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Fill the leaf ``key`` in these rows of the source with ``value``."""
        path = unravel_key(key)
        return self._put(path, torch.full_like(self.get(path, KEEP), value))

    def get_parent_tensordict(self) -> Any:
        """The container these rows belong to."""
        return self._source

    def _copy_into(self, node: Any, path: tuple[str, ...], value: Any) -> Self:
        if type(node) is SubTensorDict:
            node._set_str(path[-1], value, path)
            return self
        super()._copy_into(node, path, value)
        self._set_str(path[0], self._tensordict[path[0]], path[:1])
        return self

    def update(
        self, other: Any = None, clone: bool = False, inplace: bool = False, **kwargs: Any
    ) -> Self:
        """Write every entry of ``other`` into these rows (see ``TensorDict.update``)."""
        keys_to_update = kwargs.pop("keys_to_update", None)
        kwargs.pop("non_blocking", None)
        kwargs.pop("is_leaf", None)
        if other is None or kwargs:
            other = {**(dict(other.items()) if is_coll(other) else other or {}), **kwargs}
        if clone and is_coll(other):
            other = other.clone()
        if keys_to_update is not None:
            wanted = [unravel_key(k) for k in keys_to_update]
            if not is_coll(other):
                other = TensorDict(dict(other), batch_size=self._batch_size)
            items: Any = [
                (k, other.get(k))
                for k in keys_list(other, True, True)  # non-tensor values too
                if any(unravel_key(k)[: len(w)] == w for w in wanted)
            ]
        else:
            items = store_of(other).items() if is_coll(other) else other.items()
        for k, v in items:
            if type(v) is _NTD and not v.stacked:
                v = v.value
            self._put(unravel_key(k), v)
        return self

    def update_(self, other: Any = None, **kwargs: Any) -> Self:
        """``update`` into existing entries only."""
        return self.update(other, **kwargs)

    def apply(self, fn: Any, *others: Any, **kwargs: Any) -> Any:
        """``TensorDict.apply``; in place, the results are written into these rows."""
        if not kwargs.pop("inplace", False):
            return super().apply(fn, *others, **kwargs)
        res = super().apply(fn, *others, **kwargs)
        if res is not None:
            self.update(res)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str or (type(index) is tuple and index and type(index[0]) is str):
            self._put(unravel_key(index), value)
            return
        rows = self.to_tensordict()
        rows[index] = value
        self.update(rows)

    def to_tensordict(self, *, retain_none: Any = None) -> TensorDict:
        """A plain TensorDict holding a copy of these rows."""
        out: TensorDict = self.clone()
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return self.to_tensordict().__reduce__()


def _blank_tree(value: Any, full: tuple[int, ...], nb: int) -> Any:
    out: dict[str, Any] = {}
    for k, v in store_of(value).items():
        if isinstance(v, Tensor):
            out[k] = torch.zeros((*full, *v.shape[nb:]), dtype=v.dtype, device=v.device)
        elif type(v) is _NTD:
            out[k] = v
        else:
            out[k] = _blank_tree(v, full, nb)
    bs = torch.Size((*full, *value._batch_size[nb:]))
    return type(value)._new_unsafe(out, bs, value._device)
