"""``TensorCollection``: the one base of ``TensorDict`` and every tensorclass.

Every container method is written here once, typed to return ``Self``, as a
short call into the module that owns the job: ``_index`` (batch indexing),
``_apply`` (apply, to, clone), ``_keyops`` (select, exclude, update, flatten_keys),
``_stackcat`` (batch-shape ops, stack, cat), ``_elementwise`` (==, all, arithmetic),
``_repr`` and ``_pickling``. The tensor-like convenience methods come from the
``TensorMethods`` mixin, batch-shape ops and arithmetic from ``ShapeMethods``,
persistence and weights from ``IOMethods``, transport from ``DistributedMethods``.

The private contract (see ``_tree``): four slots (``_tensordict``, the dict of
entries; ``_batch_size``; ``_device``; ``_locked``) and ``_new_unsafe(storage,
batch_size, device)``, which builds one of the caller's type without checks.
``TensorDict`` adds its constructor and the key hot path; ``TensorClass`` adds
fields, ``__setattr__`` and the dataclass machinery, and gates new keys through
``_set_str``.

>>> import torch
>>> from tensorbox import TensorDict, TensorClass
>>> class Pair(TensorClass):
...     a: torch.Tensor
...     b: torch.Tensor
>>> p = Pair(torch.zeros(4, 2), torch.ones(4), batch_size=[4])
>>> type(p.reshape(2, 2)).__name__, type(p.to_tensordict().reshape(2, 2)).__name__
('Pair', 'TensorDict')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Self, overload

import torch
from torch import Tensor

from tensorbox._core import index as _index
from tensorbox._core import jagged_pad as _jagged_pad
from tensorbox._core import keyops as _keyops
from tensorbox._core import repr as _repr
from tensorbox._core import tree as _tree
from tensorbox._core.entries import copy_leaf, prepare_entry
from tensorbox._core.keys import NestedKey, format_key, unravel_key
from tensorbox._core.methods_entries import EntryMethods
from tensorbox._core.methods_io import OPEN as _OPEN
from tensorbox._core.methods_io import TREES as _TREES
from tensorbox._core.methods_io import UNLOCK as _UNLOCK
from tensorbox._core.methods_io import DistributedMethods, IOMethods, copy_other, put
from tensorbox._core.methods_leaves import LeafMethods
from tensorbox._core.methods_ops import ShapeMethods
from tensorbox._core.methods_shape import ShapeMethods as TensorShapeMethods
from tensorbox._core.methods_tensor import TensorMethods
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.shape import as_batch_size, check_leaf_shape
from tensorbox._core.tree import KEEP, find_missing, is_coll, missing_key_error
from tensorbox.errors import BatchSizeError, LockedError, TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.tensordict import TensorDict

__all__ = ["TensorCollection"]

#: A batch index (anything but a key): gives a container of the same type.
BatchIndex = int | slice | Tensor | Sequence[Any] | EllipsisType | None | tuple[Any, ...]

_NTD = NonTensorData
_PLAIN = _tree.PLAIN
_new = object.__new__


def _is_key(index: Any) -> bool:
    if type(index) is str:
        return True
    if type(index) is tuple and index:
        return all(type(i) is str or (type(i) is tuple and _is_key(i)) for i in index)
    return False


class TensorCollection(
    LeafMethods,
    ShapeMethods,
    TensorMethods,
    TensorShapeMethods,
    EntryMethods,
    IOMethods,
    DistributedMethods,
):
    """The container behaviour shared by ``TensorDict`` and tensorclasses (not built directly)."""

    __slots__ = (
        "__weakref__",
        "_batch_size",
        "_device",
        "_lock_stack",
        "_locked",
        "_packed",
        "_prev_lock",
        "_tensordict",
        "_writeback",
    )
    _is_tensor_collection = True

    _tensordict: dict[str, Any]
    _batch_size: torch.Size
    _device: torch.device | None
    _locked: bool
    _prev_lock: bool
    _lock_stack: list[bool]
    #: (storage, layout) of a consolidated container (see _core/consolidate.py), or None
    _packed: tuple[Tensor, dict[str, Any]] | None
    #: (source, method, args): how a view's in-place changes write back to its source
    _writeback: tuple[Any, str, tuple[Any, ...]]

    @classmethod
    def _new_unsafe(
        cls, source: dict[str, Any], batch_size: torch.Size, device: torch.device | None
    ) -> Self:
        """Build one of this type around ``source`` without any check (the contract)."""
        self = _new(cls)
        self._tensordict = source
        self._batch_size = batch_size
        self._device = device
        self._locked = False
        return self

    def _set_str(self, key: str, value: Any, path: tuple[str, ...]) -> None:
        """The one gate through which a key is added or replaced at this level."""
        if self._locked:
            raise LockedError(
                f"cannot set {format_key(path)}: the {type(self).__name__} is locked{_UNLOCK}, "
                "or write in place with set_ / td[idx] = ..."
            )
        if _OPEN and id(self) in _OPEN:  # an unlocked node of a saved tree: committed at once
            self._through(put, self, key, value, path)
            return
        self._tensordict[key] = prepare_entry(self, key, value, path)

    # ------------------------------------------------------------- conversions

    def to_dict(self, *, retain_none: bool = True) -> dict[str, Any]:
        """A nested ``dict`` of tensors (plain values for non-tensor entries); tensors shared.

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(1), n={"b": "x"}).to_dict()
        {'a': tensor([0.]), 'n': {'b': 'x'}}
        """
        out = {
            k: v if isinstance(v, Tensor) else v.value if type(v) is _NTD else v.to_dict()
            for k, v in self._tensordict.items()
        }
        if retain_none:  # a tensorclass field set to None has no entry: show it as None
            for f in getattr(type(self), "__tc_fields__", ()):
                out.setdefault(f.name, None)
        return out

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """A plain ``TensorDict`` copy: tensors cloned, nested tensorclasses converted too.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), batch_size=[2])
        >>> out = td.to_tensordict()
        >>> out["a"] is td["a"], (out == td).all()
        (False, True)
        """
        del retain_none  # None fields are stored as non-tensor data and always kept
        out: TensorDict = _tree.new_plain(
            {
                k: v.clone()
                if isinstance(v, Tensor)
                else v
                if type(v) is _NTD
                else v.to_tensordict()
                for k, v in self._tensordict.items()
            },
            self._batch_size,
            self._device,
        )
        return out

    # ------------------------------------------------------------------ shape

    @property
    def batch_size(self) -> torch.Size:
        """The leading dims shared by every leaf.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2, 3), batch_size=[2, 3])
        >>> td.batch_size = [2]        # fewer batch dims: the leaves' shapes allow it
        >>> td.batch_size, td["x"].shape
        (torch.Size([2]), torch.Size([2, 3]))
        """
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Sequence[int] | int) -> None:
        new = as_batch_size(value)
        for path, leaf in _tree.iter_shaped(self):
            if leaf.is_nested:
                from tensorbox._core.jagged import check_leaf

                check_leaf(leaf, path, new)
            else:
                check_leaf_shape(format_key(path), leaf.shape, new)
        self._write(_tree.set_batch_size_nested, self, new)  # saved at once on a saved tree

    @property
    def shape(self) -> torch.Size:
        """Same as ``batch_size`` (a container's shape is its batch size)."""
        return self._batch_size

    @property
    def batch_dims(self) -> int:
        """Number of batch dims."""
        return len(self._batch_size)

    @property
    def ndim(self) -> int:
        """Number of batch dims."""
        return len(self._batch_size)

    def dim(self) -> int:
        """Number of batch dims."""
        return len(self._batch_size)

    def numel(self) -> int:
        """Number of batch elements (the product of the batch size)."""
        return math.prod(self._batch_size)

    @overload
    def size(self, dim: None = None) -> torch.Size: ...
    @overload
    def size(self, dim: int) -> int: ...
    def size(self, dim: int | None = None) -> torch.Size | int:
        """The batch size, or its ``dim``-th entry."""
        return self._batch_size if dim is None else self._batch_size[dim]

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    @property
    def device(self) -> torch.device | None:
        """The device every leaf lives on, or None when not fixed."""
        return self._device

    @property
    def is_locked(self) -> bool:
        """True when entries may not be added, removed or replaced."""
        return self._locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        self._set_lock(bool(value))

    def lock_(self) -> Self:
        """Forbid adding, removing or replacing entries (in-place writes stay allowed).

        Also a context manager that restores the previous state on exit:

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(1))
        >>> with td.lock_():
        ...     td.is_locked
        True
        >>> td.is_locked
        False
        """
        self._prev_lock = self._locked
        self._set_lock(True)
        return self

    def unlock_(self) -> Self:
        """Allow adding, removing and replacing entries again (a context manager too:
        ``with td.unlock_(): td["new"] = x`` locks again on exit).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), batch_size=[2]).lock_()
        >>> with td.unlock_():
        ...     td["y"] = torch.ones(2)
        >>> td.is_locked, sorted(td.keys())
        (True, ['x', 'y'])
        """
        self._prev_lock = self._locked
        self._set_lock(False)
        return self

    def __enter__(self) -> Self:
        stack = getattr(self, "_lock_stack", None)
        if stack is None:
            stack = self._lock_stack = []
        stack.append(getattr(self, "_prev_lock", self._locked))
        return self

    def __exit__(self, *exc: object) -> None:
        stack = getattr(self, "_lock_stack", None)
        if stack:
            self._set_lock(stack.pop())
        link = getattr(self, "_writeback", None)
        if link is not None and not exc[0]:  # a view used as a context: write it back
            source, op, args = link
            source.update(getattr(self, op)(*args), inplace=True)

    # ------------------------------------------------------------ key access

    @overload
    def __getitem__(self, index: str | tuple[str, ...]) -> Any: ...
    @overload
    def __getitem__(self, index: BatchIndex) -> Self: ...
    def __getitem__(self, index: Any) -> Any:
        """A key (str or tuple of str) gives its value; anything else indexes the batch dims."""
        if type(index) is str:
            try:
                v = self._tensordict[index]
            except KeyError:
                raise missing_key_error(self, (index,), 0) from None
            return v.value if type(v) is _NTD else v
        if type(index) is tuple and index and type(index[0]) is str:
            return self._get_path(index)
        return _index.getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            self._set_str(index, value, (index,))
        elif _is_key(index):
            self.set(index, value)
        elif _TREES and id(self) in _TREES:  # non-tensor values reach the tree's meta.json
            self._write_rows(index, value)
        else:
            _index.setitem_batch(self, index, value)

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The value at ``key``, or ``default`` (None) when it is missing.

        A malformed key (not a str or tuple of str) raises ``TensorDictKeyError``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2])
        >>> td.get(("n", "b")).tolist(), td.get("missing"), td.get("missing", 0)
        ([1.0, 1.0], None, 0)
        """
        if type(key) is str:
            v = self._tensordict.get(key, KEEP)
            if v is KEEP:
                if default is KEEP:
                    raise missing_key_error(self, (key,), 0)
                return default
            return v.value if type(v) is _NTD else v
        if type(key) is not tuple:
            key = unravel_key(key)  # raises for anything but a (str subclass) key
        try:
            return self._get_path(key)
        except TensorDictKeyError:
            unravel_key(key)  # a malformed key raises, whatever the default
            if default is KEEP:
                raise
            return default

    def _get_path(self, path: Any) -> Any:
        """The value at a tuple key; the common all-str, all-present case is one loop."""
        node: Any = self
        try:
            for part in path:
                node = node._tensordict[part]
        except (KeyError, AttributeError, TypeError):
            flat = unravel_key(path)
            if flat != path:
                return self._get_path(flat)
            raise find_missing(self, flat) from None
        return node.value if type(node) is _NTD else node

    def __contains__(self, key: object) -> bool:
        if type(key) is str:
            return key in self._tensordict
        if _is_key(key):
            try:
                self._get_path(key)
            except TensorDictKeyError:
                return False
            return True
        raise TypeError(
            f"'in' looks up keys (str or tuple of str), got {type(key).__name__}; "
            "to search values compare with == and use .any()"
        )

    def set(
        self, key: NestedKey, value: Any, inplace: bool = False, *, non_blocking: bool = False
    ) -> Self:
        """Set ``key`` to ``value``; tuple keys create missing nested levels.

        ``inplace=True`` copies into the existing tensor (allowed when locked).
        ``non_blocking`` is accepted for tensordict's signature (copies here are synchronous).
        """
        if type(key) is str:
            if inplace and key in self._tensordict:
                return self._copy_into(self, (key,), value)
            self._set_str(key, value, (key,))
            return self
        path = unravel_key(key)
        node = self._node_for(path) if len(path) > 1 else self
        if inplace and path[-1] in node._tensordict:
            return self._copy_into(node, path, value)
        node._set_str(path[-1], value, path)
        return self

    def set_(self, key: NestedKey, value: Any) -> Self:
        """Copy ``value`` into the existing entry ``key`` (works on locked containers).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), batch_size=[2]).lock_()
        >>> x = td["x"]
        >>> td.set_("x", torch.ones(2))["x"] is x, x.tolist()   # same tensor, new values
        (True, [1.0, 1.0])
        """
        path = unravel_key(key)
        node = self._existing_parent(path)
        if path[-1] not in node._tensordict:
            raise find_missing(self, path)
        return self._copy_into(node, path, value)

    def _existing_parent(self, path: tuple[str, ...]) -> TensorCollection:
        """The container holding ``path[-1]``; every level must exist already."""
        node: Any = self
        for part in path[:-1]:
            node = node._tensordict.get(part)
            if node is None or isinstance(node, Tensor) or type(node) is _NTD:
                raise find_missing(self, path)
        return node  # type: ignore[no-any-return]

    def _copy_into(self, node: TensorCollection, path: tuple[str, ...], value: Any) -> Self:
        current = node._tensordict[path[-1]]
        if isinstance(current, Tensor):
            try:
                copy_leaf(current, value)
            except RuntimeError as err:
                raise BatchSizeError(f"cannot copy into {format_key(path)}: {err}") from None
        else:  # a non-tensor value or a node: on a saved tree, committed at once
            node._write(copy_other, node, path, value, current)
        return self

    def _node_for(self, path: tuple[str, ...]) -> TensorCollection:
        """The container that holds ``path[-1]``, creating missing levels."""
        plain = _PLAIN[0]
        node: Any = self
        for part in path[:-1]:  # the common case: every level exists and is a TensorDict
            nxt = node._tensordict.get(part)
            if type(nxt) is not plain:
                break
            node = nxt
        else:
            return node  # type: ignore[no-any-return]
        node = self
        for i, part in enumerate(path[:-1]):
            nxt = node._tensordict.get(part)
            if nxt is None:
                if node._locked:
                    raise LockedError(
                        f"cannot create {format_key(path[: i + 1])}: the container is locked{_UNLOCK}"
                    )
                nxt = _tree.new_plain({}, node._batch_size, node._device)
                node._set_str(part, nxt, path[: i + 1])
            elif isinstance(nxt, Tensor) or type(nxt) is _NTD:
                raise TensorDictKeyError(
                    f"cannot set {format_key(path)}: {format_key(path[: i + 1])} is a leaf, "
                    "not a TensorDict"
                )
            node = nxt
        return node  # type: ignore[no-any-return]

    def __delitem__(self, key: NestedKey) -> None:
        self.del_(key)

    def del_(self, key: NestedKey) -> Self:
        """Remove ``key`` (a tuple key removes a nested entry)."""
        path = unravel_key(key)
        node = self._existing_parent(path)
        store = node._tensordict
        if path[-1] not in store:
            raise find_missing(self, path)
        if node._locked:
            raise LockedError(f"cannot delete {format_key(path)}: the container is locked{_UNLOCK}")
        node._write(store.__delitem__, path[-1])  # on a saved tree, committed at once
        return self

    def pop(self, key: NestedKey, default: Any = KEEP) -> Any:
        """Remove ``key`` and return its value (or ``default`` when missing)."""
        try:
            value = self.get(key, KEEP)
        except TensorDictKeyError:
            if default is KEEP:
                raise
            return default
        self.del_(key)
        return value

    def rename_key_(self, old: NestedKey, new: NestedKey, safe: bool = False) -> Self:
        """Move the entry ``old`` to ``new``; ``safe=True`` refuses to replace an entry."""
        if self._locked:
            raise LockedError(f"cannot rename {old!r}: the container is locked{_UNLOCK}")
        if safe and new in self:
            raise KeyError(f"rename_key_: {new!r} exists already (safe=True refuses to replace it)")
        self._write(lambda: self.set(new, self.pop(old)))  # one commit on a saved tree
        return self

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
        sort: bool = False,
    ) -> Sequence[NestedKey] | Any:
        """Keys of this level (a live view); with ``include_nested`` or ``leaves_only``
        a list, with nested keys as tuples."""
        if sort:
            keys = list(self.keys(include_nested, leaves_only, is_leaf=is_leaf))
            return sorted(keys, key=_key_order)
        if is_leaf is not None:
            return [k for k, _ in self._items_is_leaf(include_nested, leaves_only, is_leaf, ())]
        if not include_nested and not leaves_only:
            return self._tensordict.keys()
        return _tree.keys_list(self, include_nested, leaves_only)

    def items(
        self, include_nested: bool = False, leaves_only: bool = False, *, sort: bool = False
    ) -> Iterator[tuple[NestedKey, Any]]:
        """``(key, value)`` pairs; non-tensor entries give their plain value (``sort=True``:
        in sorted key order)."""
        if sort:
            yield from sorted(
                self.items(include_nested, leaves_only), key=lambda kv: _key_order(kv[0])
            )
            return
        for k, v in _tree.iter_items(self, include_nested, leaves_only):
            yield k, (v.value if type(v) is _NTD else v)

    def _items_is_leaf(
        self,
        nested: bool,
        leaves_only: bool,
        is_leaf: Callable[[type], bool],
        prefix: tuple[str, ...],
    ) -> Iterator[tuple[NestedKey, Any]]:
        """``items`` where ``is_leaf(type(value))`` says what counts as a leaf."""
        for k, v in self._tensordict.items():
            key: NestedKey = (*prefix, k) if prefix else k
            leaf = isinstance(v, Tensor) or type(v) is _NTD or is_leaf(type(v))
            if leaf or not leaves_only:
                yield key, _tree.raw(v)
            if nested and not leaf:
                yield from v._items_is_leaf(True, leaves_only, is_leaf, (*prefix, k))

    def values(
        self, include_nested: bool = False, leaves_only: bool = False, *, sort: bool = False
    ) -> Iterator[Any]:
        """The values, in key order (see ``items``)."""
        for _, v in self.items(include_nested, leaves_only, sort=sort):
            yield v

    def is_empty(self) -> bool:
        """True when no tensor leaf exists at any depth."""
        return not _tree.tensor_leaves(self)

    def __iter__(self) -> Iterator[Self]:
        """Iterate over the first batch dim, like a tensor (use ``keys()`` for keys)."""
        if not self._batch_size:
            raise TypeError(
                f"iteration over a {type(self).__name__} with batch_size [] (use keys())"
            )
        return iter(self.unbind(0))

    def __getitems__(self, indices: Sequence[int] | Tensor) -> Self:
        """Batched fetch for ``torch.utils.data.DataLoader``: one gather per leaf."""
        out: Self = _index.gather_rows(self, indices)
        return out

    def to_padded_tensor(self, padding: float = 0.0, mask_key: NestedKey | None = None) -> Self:
        """Every jagged leaf padded to its longest row with ``padding`` (``[rows, longest,
        *feature]``, as ``torch.nested.to_padded_tensor``); other leaves kept as they are.
        With ``mask_key``, the ``[rows, longest]`` bool mask of the real values of the
        first jagged leaf is set under that key (on a tensorclass, a field: declare
        ``mask: torch.Tensor | None = None``). The result is a new, unlocked container
        in memory, whatever ``self`` is.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> nt = torch.nested.nested_tensor([torch.arange(2), torch.arange(1)], layout=torch.jagged)
        >>> batch = TensorDict(tokens=nt, batch_size=[2]).to_padded_tensor(-1, mask_key="mask")
        >>> batch["tokens"].tolist(), batch["mask"].tolist()
        ([[0, 1], [0, -1]], [[True, True], [True, False]])
        """
        return _jagged_pad.pad_tree(self, padding, mask_key)

    def pad_rows(self, index: Any, padding: float = 0.0, mask_key: NestedKey | None = None) -> Self:
        """``self[index].to_padded_tensor(padding, mask_key)`` in one step: each jagged
        leaf's selected rows are gathered straight into the padding, with no jagged
        batch built in between. As a DataLoader's ``collate_fn`` over the row numbers,
        it serves padded batches: ``DataLoader(range(len(ds)), batch_size=64,
        shuffle=True, collate_fn=ds.pad_rows)``.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> nt = torch.nested.nested_tensor([torch.arange(2), torch.arange(3)], layout=torch.jagged)
        >>> TensorDict(tokens=nt, batch_size=[2]).pad_rows([1, 0], -1)["tokens"].tolist()
        [[0, 1, 2], [0, 1, -1]]
        """
        return _jagged_pad.pad_rows(self, index, padding, mask_key)

    # ------------------------------------------------------------ key structure

    def update(
        self,
        other: Mapping[Any, Any] | TensorCollection | None = None,
        clone: bool = False,
        inplace: bool = False,
        *,
        non_blocking: bool = False,
        keys_to_update: Sequence[NestedKey] | None = None,
        is_leaf: Callable[[type], bool] | None = None,
        **kwargs: Any,
    ) -> Self:
        """Merge ``other`` in, recursing into nested containers present on both sides.

        ``clone=True`` copies the incoming tensors; ``inplace=True`` writes into existing
        tensors; ``keys_to_update`` limits the merge to those keys. Keyword arguments
        are more entries (``td.update(b=x)``).
        """
        if other is None or kwargs:
            other = {**(dict(other.items()) if is_coll(other) else other or {}), **kwargs}
        if clone:
            other = (
                other.clone()
                if is_coll(other)
                else _tree.new_plain({}, self._batch_size, None).update(other).clone()
            )
        if _TREES and id(self) in _TREES:  # a node of a saved tree: one commit
            self._through(_keyops.update, self, other, inplace, keys_to_update)
        else:  # the common case, without the gate's extra call
            _keyops.update(self, other, inplace, keys_to_update)
        return self

    def update_(
        self,
        other: Mapping[Any, Any] | TensorCollection | None = None,
        *,
        keys_to_update: Sequence[NestedKey] | None = None,
        non_blocking: bool = False,
        **kwargs: Any,
    ) -> Self:
        """Copy the values of ``other`` (and keyword arguments) into the existing entries,
        in place; every key must exist here (works on locked containers)."""
        if other is None or kwargs:
            other = {**(dict(other.items()) if is_coll(other) else other or {}), **kwargs}
        self._write(_keyops.update, self, other, True, keys_to_update, True)
        return self

    def copy_(self, other: Mapping[str, Any] | TensorCollection) -> Self:
        """Same as ``update_``."""
        return self.update_(other)

    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> Self:
        """Only the given (possibly nested) keys; missing keys raise unless ``strict=False``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2), "c": torch.ones(2)}}, [2])
        >>> td.select("a", ("n", "b")).keys(include_nested=True, leaves_only=True)
        ['a', ('n', 'b')]
        """
        if inplace:  # on a saved tree, saved at once
            return self._write(_keyops.select, self, keys, inplace, strict)  # type: ignore[no-any-return]
        out: Self = _keyops.select(self, keys, inplace, strict)
        return out

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> Self:
        """Everything but the given (possibly nested) keys.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2), "c": torch.ones(2)}}, [2])
        >>> td.exclude(("n", "b")).keys(include_nested=True, leaves_only=True)
        ['a', ('n', 'c')]
        """
        out: Self = (
            self._write(_keyops.exclude, self, keys, inplace)
            if inplace
            else _keyops.exclude(self, keys, inplace)
        )
        return out

    def flatten_keys(self, separator: str = ".", inplace: bool = False) -> Self:
        """One level with keys joined by ``separator``: ``{"a": {"b": x}}`` -> ``{"a.b": x}``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> list(td.flatten_keys().keys()), list(td.flatten_keys("/").keys())
        (['a.b'], ['a/b'])
        """
        out: Self = _keyops.flatten_keys(self, separator)
        if inplace:
            return self._replace_entries(out)
        out._writeback = (self, "unflatten_keys", (separator,))
        return out

    def _replace_entries(self, new: TensorCollection) -> Self:
        """Take ``new``'s entries in place (an ``inplace=True`` key-structure op)."""
        if self._locked:
            raise LockedError(f"cannot restructure a locked container in place{_UNLOCK}")
        self._write(setattr, self, "_tensordict", new._tensordict)
        return self

    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> Self:
        """The inverse of ``flatten_keys``."""
        out: Self = _keyops.unflatten_keys(self, separator)
        if inplace:
            return self._replace_entries(out)
        out._writeback = (self, "flatten_keys", (separator,))
        return out

    # ---------------------------------------------------------- repr, pickling

    def __repr__(self) -> str:
        return _repr.format_repr(self)

    def __reduce__(self) -> tuple[Any, ...]:
        if getattr(self, "_packed", None) is not None:  # one buffer and its layout
            from tensorbox._core.consolidate import packed_reduce

            return packed_reduce(self)
        from tensorbox._core import pickling as _pickling

        return _pickling.reduce(self)


def _key_order(key: Any) -> tuple[str, ...]:
    """Sort key of a nested key: its parts."""
    return (key,) if isinstance(key, str) else tuple(key)
