"""``LazyStackedTensorDict``: containers stacked without copying, as tensordict's lazy stack.

``torch.stack(tds)`` copies every leaf into one tensor and needs every leaf shape to
agree. ``lazy_stack(tds, dim)`` keeps the containers as they are and stacks on read:

- ``tensordicts`` are the members, ``stack_dim`` the new batch dim; the batch size is
  the members' with ``len(tensordicts)`` inserted at ``stack_dim``;
- ``get(key)`` stacks that key's leaves now (a nested container comes back as a lazy
  stack of the members' nested containers); leaves whose shapes differ between members
  (heterogeneous shapes) raise ``RuntimeError`` on ``get``, but the stack still holds
  them: ``get_nestedtensor(key)`` (``stack_dim`` 0) gives them as a nested tensor;
- ``stack[i]`` along ``stack_dim`` 0 is member ``i`` itself, ``unbind(stack_dim)`` the
  members; writes by key (``set``, ``update``, ``stack[key] = v``) are split along the
  stack dim into the members;
- ``clone()`` and ``apply(fn)`` give lazy stacks again; ``contiguous()``,
  ``to_tensordict()`` and ``densify()`` give the dense ``TensorDict`` (where every
  shape agrees), and so does every other operation.

>>> import torch
>>> from tensorbox import TensorDict, lazy_stack
>>> a = TensorDict(x=torch.zeros(2, 3), batch_size=[2])
>>> b = TensorDict(x=torch.ones(2, 5), batch_size=[2])
>>> s = lazy_stack([a, b])
>>> s.batch_size, s[1] is b
(torch.Size([2, 2]), True)
>>> lazy_stack([TensorDict(x=torch.zeros(3)), TensorDict(x=torch.ones(5))]).get_nestedtensor(
...     "x", layout=torch.jagged
... ).is_nested
True
>>> lazy_stack([a, a.clone()]).contiguous()["x"].shape
torch.Size([2, 2, 3])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

import torch
from torch import Tensor

from tensorbox._core.functional import stack as dense_stack
from tensorbox._core.getdefault import UNSET, missing_default
from tensorbox._core.lazystack_pad import pad_in_place
from tensorbox._core.nestedkey import NestedKey, format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.nontensor import wrap as _wrap
from tensorbox._core.tensordict import TensorDict
from tensorbox._core.tree import KEEP, is_coll, keys_list
from tensorbox._core.viewentries import DenseResults, FixedBatch, ViewEntries
from tensorbox.errors import BatchSizeError, LockedError

__all__ = ["LazyStackedTensorDict", "lazy_stack"]

_NTD = NonTensorData
_UPDATE_OPTIONS = (
    "clone",
    "inplace",
    "non_blocking",
    "keys_to_update",
    "is_leaf",
    "update_batch_size",
)


class LazyStackedTensorDict(FixedBatch, DenseResults, TensorDict):
    """Containers stacked along ``stack_dim`` without copying (see the module doc).

    >>> import torch
    >>> from tensorbox import LazyStackedTensorDict, TensorDict
    >>> a, b = TensorDict(x=torch.zeros(3)), TensorDict(x=torch.ones(4))
    >>> s = LazyStackedTensorDict(a, b, stack_dim=0)
    >>> s.batch_size, [t["x"].shape[0] for t in s.tensordicts]
    (torch.Size([2]), [3, 4])
    """

    __slots__ = ("_members", "_stack_dim")

    _members: list[Any]
    _stack_dim: int

    def __init__(self, *tensordicts: Any, stack_dim: int = 0, **kwargs: Any) -> None:
        kwargs.pop("hook_out", None)
        kwargs.pop("hook_in", None)
        if kwargs:
            raise TypeError(f"LazyStackedTensorDict: unexpected argument(s) {sorted(kwargs)}")
        members = list(tensordicts)
        for i, td in enumerate(members):
            if not is_coll(td):
                raise TypeError(
                    f"lazy_stack: item {i} is a {type(td).__name__}, not a TensorDict or "
                    "tensorclass"
                )
            if td.batch_size != members[0].batch_size:
                raise BatchSizeError(
                    f"lazy_stack: every item must have the same batch size; item {i} has "
                    f"{tuple(td.batch_size)}, item 0 {tuple(members[0].batch_size)}"
                )
        base = members[0].batch_size if members else torch.Size()
        n = len(base) + 1
        if not -n <= stack_dim < n:
            raise IndexError(f"lazy_stack: dim {stack_dim} is out of range for {n} dims")
        self._stack_dim = stack_dim % n
        self._members = members
        self._batch_size = self._stacked_size()
        devices = {td.device for td in members}
        self._device = devices.pop() if len(devices) == 1 else None

    def _stacked_size(self) -> torch.Size:
        base = list(self._members[0].batch_size) if self._members else []
        base.insert(self._stack_dim, len(self._members))
        return torch.Size(base)

    @classmethod
    def lazy_stack(
        cls, items: Sequence[Any], dim: int = 0, *, out: Any = None, **kwargs: Any
    ) -> Any:
        """Stack ``items`` along ``dim`` without copying (tensors are stacked densely)."""
        items = list(items)
        if items and all(isinstance(t, Tensor) for t in items):
            return torch.stack(items, dim, out=out)
        res = cls(*items, stack_dim=dim)
        if out is not None:
            out.update(res, inplace=True)
            return out
        return res

    # ------------------------------------------------------------- properties

    @property
    def tensordicts(self) -> list[Any]:
        """The stacked containers (the same objects, not copies)."""
        return self._members

    @property
    def stack_dim(self) -> int:
        """The batch dim along which the members are stacked."""
        return self._stack_dim

    def _fixed_batch_message(self) -> str:
        # The batch size: the members' with the stack dim inserted.
        return (
            "cannot set the batch size of a lazy stack: densify it first "
            "(td = td.to_tensordict()) and set the batch size of the copy"
        )

    @property
    def _locked(self) -> bool:
        return bool(self._members) and all(td.is_locked for td in self._members)

    @_locked.setter
    def _locked(self, value: bool) -> None:
        for td in self._members:
            td._set_lock(value)

    def _set_lock(self, flag: bool) -> None:
        for td in self._members:
            td._set_lock(flag)

    def _del_entry(self, key: str) -> None:
        self.del_(key)

    @property
    def _tensordict(self) -> dict[str, Any]:  # type: ignore[override]
        out = ViewEntries()
        out.view = self
        put = dict.__setitem__
        if self._members:
            for k in self._members[0]._tensordict:
                put(out, k, self._stack_key(k, (k,)))
        return out

    # ------------------------------------------------------------------ reads

    def _stack_key(self, key: str, path: tuple[str, ...]) -> Any:
        values = [td._tensordict[key] for td in self._members]
        return _stack_values(values, self._stack_dim, self._members[0].batch_size, path)

    def get(self, key: NestedKey, default: Any = UNSET) -> Any:
        """The members' values at ``key``, stacked (``RuntimeError`` when their shapes
        differ); a nested container comes back as a lazy stack."""
        default = missing_default(default, KEEP)
        path = unravel_key(key)
        node: Any = self
        parent: Any = self
        for i, part in enumerate(path):
            if not isinstance(node, LazyStackedTensorDict):
                return node.get(path[i:], default)
            if not node._members or part not in node._members[0]._tensordict:
                if default is KEEP:
                    raise KeyError(f"key {format_key(path)} not found in the lazy stack")
                return default
            try:
                parent, node = node, node._stack_key(part, path[: i + 1])
            except KeyError:
                if default is KEEP:
                    raise
                return default
        return _wrap(node, parent._batch_size) if type(node) is _NTD else node

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str or (type(index) is tuple and index and type(index[0]) is str):
            v = self.get(index, KEEP)
            return v.value if type(v) is _NTD else v
        if self._stack_dim == 0 and type(index) is int:
            return self._members[index]
        if self._stack_dim == 0 and type(index) is slice:
            return LazyStackedTensorDict(*self._members[index], stack_dim=0)
        return super().__getitem__(index)

    def get_nestedtensor(self, key: NestedKey, *, layout: Any = None) -> Tensor:
        """The members' leaves at ``key`` as one nested tensor (``stack_dim`` must be 0)."""
        if self._stack_dim != 0:
            raise RuntimeError(
                f"get_nestedtensor needs the lazy stack's stack_dim to be 0, got "
                f"{self._stack_dim} (the nested tensor's first dim is the stack dim)"
            )
        values = [td.get(key) for td in self._members]
        return torch.nested.nested_tensor(values, layout=layout)

    def unbind(self, dim: int = 0) -> tuple[Any, ...]:
        """The members along ``stack_dim``; along another dim, lazy stacks of the slices."""
        d = dim % len(self._batch_size) if self._batch_size else dim
        if d == self._stack_dim:
            return tuple(self._members)
        inner = d if d < self._stack_dim else d - 1
        parts = [td.unbind(inner) for td in self._members]
        sd = self._stack_dim if d > self._stack_dim else self._stack_dim - 1
        return tuple(LazyStackedTensorDict(*row, stack_dim=sd) for row in zip(*parts, strict=True))

    def __iter__(self) -> Any:
        return iter(self.unbind(0))

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    def __repr__(self) -> str:
        return (
            f"LazyStackedTensorDict(stack_dim={self._stack_dim}, batch_size="
            f"{list(self._batch_size)}, tensordicts={self._members!r})"
        )

    # --------------------------------------------------------------- dense copies

    def densify(self, *, layout: Any = None) -> Any:
        """The dense stack (``RuntimeError`` when leaf shapes differ between members);
        ``layout=torch.jagged`` stacks heterogeneous leaves as nested tensors instead."""
        if layout is not None:
            out = TensorDict(batch_size=self._batch_size, device=self._device)
            for key in keys_list(self._members[0], True, True):  # never drop a value
                out.set(key, self.get_nestedtensor(key, layout=layout))
            return out
        try:
            return dense_stack(self._members, self._stack_dim)
        except BatchSizeError as err:
            raise BatchSizeError(
                f"cannot densify the lazy stack: {err}; its members' leaves differ in shape "
                "(read them one by one, or use get_nestedtensor / densify(layout=torch.jagged))"
            ) from None

    def contiguous(self, *, inplace: bool = False, canonical: bool = False) -> Any:
        """The dense stack (see ``densify``)."""
        if inplace:
            raise NotImplementedError(
                "contiguous(inplace=True) on a lazy stack: a lazy stack cannot become dense "
                "in place; use td = td.contiguous()"
            )
        dense = self.densify()
        return dense.contiguous(canonical=True) if canonical else dense

    def to_tensordict(self, *, retain_none: Any = None) -> Any:
        """The dense stack, its leaves copied (see ``densify``)."""
        return self.densify().clone()

    def clone(self, recurse: bool = True) -> Self:
        """A lazy stack of the members' clones."""
        return type(self)(*(td.clone(recurse) for td in self._members), stack_dim=self._stack_dim)

    def apply(self, fn: Any, *others: Any, **kwargs: Any) -> Any:
        """``fn`` on every leaf of every member: a lazy stack again (dense with ``others``
        or a new ``batch_size``)."""
        if others or kwargs.get("batch_size") is not None or kwargs.get("out") is not None:
            return self.densify().apply(fn, *others, **kwargs)
        if kwargs.pop("inplace", False):
            # on the dense stack (fn may use stack-shaped values, as masked_fill_ does),
            # the results copied back into the members; per member where shapes differ
            try:
                dense = self.densify()
            except BatchSizeError:
                for td in self._members:
                    td.apply(fn, inplace=True, **kwargs)
                return self
            res = dense.apply(fn, **kwargs)
            if res is not None:
                self.update(res, inplace=True)
            return self
        res = [td.apply(fn, **kwargs) for td in self._members]
        if any(r is None for r in res):
            return None
        return type(self)(*res, stack_dim=self._stack_dim)

    def _no_inplace(self, what: str) -> None:
        raise NotImplementedError(
            f"{what}(inplace=True) on a lazy stack: its members keep their shapes; "
            f"use td = td.{what}(...) for a new container"
        )

    def pad(
        self,
        pad_size: Sequence[int],
        value: float = 0.0,
        *,
        inplace: bool = False,
        safe: bool = True,
    ) -> Self:
        """``TensorDict.pad`` (dense); ``inplace=True`` pads each member in place and adds
        or drops members along the stack dim."""
        if not inplace:
            return super().pad(pad_size, value, safe=safe)
        pad_in_place(
            self, pad_size, value, lambda sizes, v: super(LazyStackedTensorDict, self).pad(sizes, v)
        )
        return self

    def repeat(self, *repeats: Any, inplace: bool = False) -> Self:
        """``TensorDict.repeat`` (dense); ``inplace=True`` raises ``NotImplementedError``."""
        if inplace:
            self._no_inplace("repeat")
        return super().repeat(*repeats)  # the dense result

    def repeat_interleave(self, *args: Any, inplace: bool = False, **kwargs: Any) -> Self:
        """``TensorDict.repeat_interleave`` (dense); ``inplace=True`` raises."""
        if inplace:
            self._no_inplace("repeat_interleave")
        return super().repeat_interleave(*args, **kwargs)

    def unflatten(
        self, dim: int, unflattened_size: Sequence[int], *, inplace: bool = False
    ) -> Self:
        """``TensorDict.unflatten`` (dense); ``inplace=True`` raises."""
        if inplace:
            self._no_inplace("unflatten")
        return super().unflatten(dim, unflattened_size)

    def flatten(self, start_dim: int = 0, end_dim: int = -1, **kwargs: Any) -> Self:
        """``TensorDict.flatten`` (dense); ``inplace=True`` raises."""
        if kwargs.get("inplace"):
            self._no_inplace("flatten")
        return super().flatten(start_dim, end_dim)

    # ----------------------------------------------------------------- writes

    def _set_str(self, key: str, value: Any, path: tuple[str, ...]) -> None:
        if self._locked:
            raise LockedError(f"cannot set {format_key(path)}: the lazy stack is locked")
        if type(value) is _NTD:
            value = value.value if not value.stacked else value
        if isinstance(value, Mapping) and not is_coll(value):
            value = TensorDict(dict(value), batch_size=self._batch_size, device=self._device)
        if isinstance(value, Tensor) or is_coll(value):
            parts = value.unbind(self._stack_dim)
            if len(parts) != len(self._members):
                raise BatchSizeError(
                    f"cannot set {format_key(path)}: {len(parts)} slices along the stack dim, "
                    f"the lazy stack has {len(self._members)} members"
                )
            for td, part in zip(self._members, parts, strict=True):
                td.set(key, part)
        else:
            for td in self._members:
                td.set(key, value)

    def set(
        self, key: NestedKey, value: Any, inplace: bool = False, *, non_blocking: bool = False
    ) -> Self:
        """Split ``value`` along the stack dim and set each slice in its member."""
        path = unravel_key(key)
        if len(path) == 1:
            self._set_str(path[0], value, path)
            return self
        if isinstance(value, Tensor) or is_coll(value):
            for td, part in zip(self._members, value.unbind(self._stack_dim), strict=True):
                td.set(path, part, inplace=inplace)
        else:
            for td in self._members:
                td.set(path, value, inplace=inplace)
        return self

    def update(
        self, other: Any = None, clone: bool = False, inplace: bool = False, **kw: Any
    ) -> Self:
        """Split ``other`` along the stack dim and update each member with its slice
        (see ``TensorDict.update``)."""
        return self._split_update("update", other, clone=clone, inplace=inplace, **kw)

    def update_(self, other: Any = None, **kw: Any) -> Self:
        """``update_`` of each member with its slice of ``other``."""
        return self._split_update("update_", other, **kw)

    def _split_update(self, method: str, other: Any, **kw: Any) -> Self:
        extra = {k: kw.pop(k) for k in list(kw) if k not in _UPDATE_OPTIONS}
        if other is None or extra:
            other = {**(dict(other.items()) if is_coll(other) else other or {}), **extra}
        if not is_coll(other):
            other = TensorDict(dict(other), batch_size=self._batch_size)
        if kw.get("update_batch_size") and other.batch_size != self._batch_size:
            if self._locked:
                raise LockedError(f"{method}(update_batch_size=True): the lazy stack is locked")
            raise BatchSizeError(
                f"{method}(update_batch_size=True): a lazy stack keeps its batch size "
                f"{tuple(self._batch_size)} (the source has {tuple(other.batch_size)}); "
                "build a new lazy_stack of the source's members"
            )
        if isinstance(other, LazyStackedTensorDict) and other._stack_dim == self._stack_dim:
            parts: Sequence[Any] = other._members
        else:
            if other.batch_size != self._batch_size:
                other = other.expand(self._batch_size)
            parts = other.unbind(self._stack_dim)
        for td, part in zip(self._members, parts, strict=True):
            getattr(td, method)(part, **kw)
        return self

    def _copy_into(self, node: Any, path: tuple[str, ...], value: Any) -> Self:
        if not isinstance(node, LazyStackedTensorDict):
            super()._copy_into(node, path, value)
            return self
        if isinstance(value, Tensor) or is_coll(value):
            parts: Sequence[Any] = value.unbind(node._stack_dim)
        else:
            parts = [value] * len(node._members)
        for td, part in zip(node._members, parts, strict=True):
            td.set_(path[-1], part)
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Fill the leaf ``key`` of every member with ``value``, in place."""
        for td in self._members:
            td.fill_(key, value)
        return self

    def del_(self, key: NestedKey) -> Self:
        """Remove ``key`` from every member."""
        for td in self._members:
            td.del_(key)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str or (type(index) is tuple and index and type(index[0]) is str):
            self.set(index, value)
        elif self._stack_dim == 0 and type(index) is int:
            self._members[index].update(value)  # a member: its new keys are created too
        else:
            rows = self.densify()
            rows[index] = value
            self.update(rows)

    def append(self, tensordict: Any) -> None:
        """Add a member at the end of the stack dim."""
        self.insert(len(self._members), tensordict)

    def insert(self, index: int, tensordict: Any) -> None:
        """Add a member at ``index`` along the stack dim (same batch size and keys)."""
        if self._locked:
            raise LockedError("cannot insert into a locked lazy stack: unlock_() first")
        if self._members and tensordict.batch_size != self._members[0].batch_size:
            raise BatchSizeError(
                f"cannot insert a container of batch size {tuple(tensordict.batch_size)} "
                f"into a lazy stack of members of batch size "
                f"{tuple(self._members[0].batch_size)}"
            )
        self._members.insert(index, tensordict)
        self._batch_size = self._stacked_size()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._members, self._stack_dim))


def _rebuild(members: list[Any], stack_dim: int) -> LazyStackedTensorDict:
    return LazyStackedTensorDict(*members, stack_dim=stack_dim)


def _stack_values(values: list[Any], dim: int, base: torch.Size, path: tuple[str, ...]) -> Any:
    first = values[0]
    if isinstance(first, Tensor):
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) > 1:
            raise BatchSizeError(
                f"Failed to stack tensors within a tensordict: key {format_key(path)} has "
                f"shapes {sorted(shapes)} in the stacked containers; read them one by one "
                "(td.tensordicts[i]) or as a nested tensor (get_nestedtensor)"
            )
        return torch.stack(values, dim)
    if type(first) is _NTD:
        return NonTensorData.stack(values, dim, base)
    return LazyStackedTensorDict(*values, stack_dim=dim)


def lazy_stack(items: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
    """``LazyStackedTensorDict.lazy_stack(items, dim)``: stack containers without copying.

    >>> import torch
    >>> from tensorbox import TensorDict, lazy_stack
    >>> lazy_stack([TensorDict(a=torch.zeros(3)), TensorDict(a=torch.ones(3))]).batch_size
    torch.Size([2])
    """
    return LazyStackedTensorDict.lazy_stack(items, dim, out=out)
