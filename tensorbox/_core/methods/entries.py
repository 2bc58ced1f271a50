"""The container's methods by entry: reading and writing entries by key.

``get``/``set``/``update``/``pop``/``del_`` and their relatives, by key or at a batch
index (``set_at_``, ``update_at_``, ``get_at``), and non-tensor entries. A method whose
job is "the entry at this key" belongs here; one that changes *which* keys there are,
or where they sit (select, exclude, rename, flatten), is in
:mod:`tensorbox._core.methods.structure`. Part of the container base
(``TensorCollection`` mixes this class in).

Every write that adds, replaces or removes an entry goes through a gate of the
container (``_set_str``, ``_write``): on a node of a saved tree it is committed at once
(see ``_core.backing``).

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"a": torch.zeros(3, 2), "n": {"b": torch.ones(3)}}, batch_size=[3])
>>> td.set_at_("a", 1.0, 1)["a"][:, 0].tolist()
[0.0, 1.0, 0.0]
>>> td.get(("n", "b")).tolist()
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import torch
from torch import Tensor

from tensorbox._core import keyops as _keyops
from tensorbox._core import ports as _ports
from tensorbox._core import tree as _tree
from tensorbox._core.backing import TREES as _TREES
from tensorbox._core.backing import UNLOCK as _UNLOCK
from tensorbox._core.entries import copy_leaf, prepare_entry, replace_value
from tensorbox._core.getdefault import UNSET, missing_default
from tensorbox._core.methods.base import MISSING, MixinBase, is_container
from tensorbox._core.nestedkey import NestedKey, format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.nontensor import wrap as _wrap
from tensorbox._core.shape import normalize_index
from tensorbox._core.tree import KEEP, find_missing, is_coll, missing_key_error
from tensorbox._core.unbatched import UnbatchedTensor
from tensorbox.errors import BatchSizeError, KeyTypeError, LockedError, TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = ["EntryMethods", "KeyList", "copy_other", "entry_parent", "is_key", "put", "tensor_keys"]

_NTD = NonTensorData


def is_key(index: Any) -> bool:
    """True for a key (a str, or a non-empty tuple of str and such tuples)."""
    if type(index) is str:
        return True
    if type(index) is tuple and index:
        return all(type(i) is str or (type(i) is tuple and is_key(i)) for i in index)
    return False


class KeyList(list[NestedKey]):
    """The list ``keys(include_nested=True)`` gives: ``in`` also finds a key spelled with
    nested tuples or as a one-element tuple (``("a", ("b",), "c")``, ``("a",)``), as
    tensordict's keys view does.

    >>> import torch; from tensorbox import TensorDict
    >>> keys = TensorDict({"a": {"b": torch.zeros(1)}}, batch_size=[1]).keys(True)
    >>> ("a", ("b",)) in keys, ("a",) in keys, ("b",) in keys
    (True, True, False)
    """

    __slots__ = ()

    def __contains__(self, key: object) -> bool:
        if list.__contains__(self, key):
            return True
        if type(key) is not tuple or not is_key(key):
            return False
        flat = unravel_key(key)
        return list.__contains__(self, flat[0] if len(flat) == 1 else flat)


def tensor_keys(td: Any, nested: bool, prefix: tuple[str, ...] = ()) -> list[NestedKey]:
    """``keys(nested, leaves_only=True)``: the tensor leaves (an ``UnbatchedTensor``
    included), never a non-tensor value."""
    out: list[NestedKey] = []
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor) or (type(v) is _NTD and type(v.data) is UnbatchedTensor):
            out.append((*prefix, k) if prefix else k)
        elif nested and type(v) is not _NTD:
            out.extend(tensor_keys(v, True, (*prefix, k)))
    return out


def put(node: Any, key: str, value: Any, path: tuple[str, ...]) -> None:
    """Add or replace the entry ``key`` (the container's ``_set_str`` past its gates)."""
    node._tensordict[key] = prepare_entry(node, key, value, path)


def copy_other(node: Any, path: tuple[str, ...], value: Any, current: Any) -> None:
    """``set_`` of a non-tensor entry or a nested container ``current``."""
    if type(current) is NonTensorData:
        node._tensordict[path[-1]] = replace_value(node, path[-1], value, path)
    else:
        current.update_(value)


def entry_parent(obj: Any, path: tuple[str, ...], what: str) -> Any:
    """The container holding the existing entry ``path``, or a ``TensorDictKeyError``."""
    node = obj if len(path) == 1 else obj.get(path[:-1], MISSING)
    if node is MISSING or not is_container(node) or path[-1] not in node:
        raise TensorDictKeyError(
            f"{what}: key {format_key(path)} not found; it writes into an existing entry "
            "(add a new one with set())"
        )
    return node


class EntryMethods(MixinBase):
    """Mixin of ``TensorCollection``: entries by key (read, write)."""

    __slots__ = ()

    # ------------------------------------------------------------------ reading

    def get(self, key: NestedKey, default: Any = UNSET) -> Any:
        """The entry at ``key``, or ``default`` when it is missing (``None`` when left out,
        or ``KeyError`` after ``set_get_defaults_to_none(False)``, as in tensordict).

        A non-tensor entry comes as tensordict gives it: a ``NonTensorData`` whose
        ``batch_size`` is this level's (``.data`` the value, ``.tolist()`` one per row), or
        the ``NonTensorStack`` of per-row values; ``td[key]`` gives the Python value.

        A malformed key (not a str or tuple of str) raises ``TensorDictKeyError``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2])
        >>> td.get(("n", "b")).tolist(), td.get("missing"), td.get("missing", 0)
        ([1.0, 1.0], None, 0)
        >>> td["tag"] = "x"
        >>> td.get("tag").data, td.get("tag").tolist(), td["tag"]
        ('x', ['x', 'x'], 'x')
        """
        if type(key) is str:
            v = self._tensordict.get(key, KEEP)
            if v is KEEP:
                default = missing_default(default, KEEP)
                if default is KEEP:
                    raise missing_key_error(self, (key,), 0)
                return default
            return _wrap(v, self._batch_size) if type(v) is _NTD else v
        if type(key) is not tuple:
            key = unravel_key(key)  # raises for anything but a (str subclass) key
        try:
            return self._get_path(key)
        except TensorDictKeyError:
            unravel_key(key)  # a malformed key raises, whatever the default
            default = missing_default(default, KEEP)
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
        if type(node) is _NTD:  # it reports the batch size of its level
            return _wrap(
                node, self._get_path(path[:-1])._batch_size if path[1:] else self._batch_size
            )
        return node

    def _get_value(self, key: NestedKey, default: Any = UNSET) -> Any:
        """``get``, with a non-tensor entry read as its Python value (as ``td[key]``): the
        internal read of code that works on values."""
        v = self.get(key, default)
        return v.value if type(v) is _NTD else v

    def __contains__(self, key: object) -> bool:
        if type(key) is str:
            return key in self._tensordict
        if is_key(key):
            try:
                self._get_path(key)
            except TensorDictKeyError:
                return False
            return True
        raise KeyTypeError(
            f"'in' looks up keys (str or tuple of str), got {type(key).__name__}; "
            "to search values compare with == and use .any()"
        )

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
        sort: bool = False,
    ) -> Sequence[NestedKey] | Any:
        """Keys of this level (a live view); with ``include_nested`` or ``leaves_only``
        a list, with nested keys as tuples.

        ``leaves_only`` lists the tensor leaves, as in tensordict: non-tensor entries (a
        string, a tensorclass's non-tensor field) are keys, not leaves; ``is_leaf(type)``
        chooses otherwise (``is_leaf=lambda c: True`` lists them too).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"x": torch.zeros(2), "n": {"tag": "a"}}, batch_size=[2])
        >>> td.keys(True), td.keys(True, True)
        (['x', 'n', ('n', 'tag')], ['x'])
        """
        if sort:
            keys = list(self.keys(include_nested, leaves_only, is_leaf=is_leaf))
            return sorted(keys, key=_key_order)
        if is_leaf is not None:
            return [k for k, _ in self._items_is_leaf(include_nested, leaves_only, is_leaf, ())]
        if not include_nested and not leaves_only:
            return self._tensordict.keys()
        if leaves_only:
            return KeyList(tensor_keys(self, include_nested))
        return KeyList(_tree.keys_list(self, include_nested, False))  # type: ignore[arg-type]

    def items(
        self, include_nested: bool = False, leaves_only: bool = False, *, sort: bool = False
    ) -> Iterator[tuple[NestedKey, Any]]:
        """``(key, value)`` pairs; non-tensor entries come as ``get`` gives them (a
        ``NonTensorData``/``NonTensorStack``), and are left out by ``leaves_only`` (see
        ``keys``) (``sort=True``: in sorted key order)."""
        if sort:
            yield from sorted(
                self.items(include_nested, leaves_only), key=lambda kv: _key_order(kv[0])
            )
            return
        for k, v in _tree.iter_items(self, include_nested, leaves_only):  # type: ignore[arg-type]
            if type(v) is _NTD:
                if not leaves_only or type(v.data) is UnbatchedTensor:
                    yield k, self._get_path(k if type(k) is tuple else (k,))
            else:
                yield k, v

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
            if type(v) is _NTD:  # a value has no entries: is_leaf says whether it is listed
                if not leaves_only or type(v.data) is UnbatchedTensor or is_leaf(_NTD):
                    yield key, _wrap(v, self._batch_size)
                continue
            leaf = isinstance(v, Tensor) or is_leaf(type(v))
            if leaf or not leaves_only:
                yield key, v
            if nested and not leaf:
                yield from v._items_is_leaf(True, leaves_only, is_leaf, (*prefix, k))

    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        sort: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> Iterator[Any]:
        """The values, in key order (see ``items``); ``is_leaf(type)`` says which nested
        containers count as leaves (as ``keys(is_leaf=)``)."""
        if is_leaf is not None:
            for _, v in self._items_is_leaf(include_nested, leaves_only, is_leaf, ()):
                yield v
            return
        for _, v in self.items(include_nested, leaves_only, sort=sort):
            yield v

    def is_empty(self) -> bool:
        """True when no leaf exists at any depth: nested containers may exist, but hold
        neither a tensor nor a non-tensor value (a string is content, as in tensordict).

        >>> from tensorbox import TensorDict
        >>> TensorDict({"a": {"b": {}}}).is_empty(), TensorDict({"a": {"c": "x"}}).is_empty()
        (True, False)
        """
        return not _has_leaf(self)

    def get_at(self, key: NestedKey, index: Any, default: Any = None) -> Any:
        """The rows ``index`` of the entry ``key`` (``default`` when ``key`` is missing,
        as ``get``).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.arange(4), batch_size=[4]).get_at("a", slice(1, 3)).tolist()
        [1, 2]
        """
        path = unravel_key(key)
        try:
            parent = entry_parent(self, path, "get_at")
        except TensorDictKeyError:
            return default
        index = normalize_index(index, len(self.batch_size))
        value = parent.get(path[-1])
        if isinstance(value, Tensor) or is_container(value):
            return value[index]
        return parent[index].get(path[-1])  # non-tensor: the rows' values

    def get_item_shape(self, key: NestedKey) -> torch.Size:
        """Shape of the entry at ``key`` (a nested container's batch size; ``batch_size`` for
        a non-tensor).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2, 5), batch_size=[2]).get_item_shape("a")
        torch.Size([2, 5])
        """
        v = self._get_or_raise(key)
        return v.shape if hasattr(v, "shape") else self.batch_size

    def entry_class(self, key: NestedKey) -> type:
        """Class of the entry at ``key``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2), batch_size=[2]).entry_class("a")
        <class 'torch.Tensor'>
        """
        return type(self._get_or_raise(key))

    def _get_or_raise(self, key: NestedKey) -> Any:
        v = self.get(key, MISSING)
        if v is MISSING:
            raise KeyError(f"key {format_key(key)} not found")
        return v

    def setdefault(self, key: NestedKey, default: Any) -> Any:
        """The entry at ``key``; when missing, set it to ``default`` first.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(batch_size=[2])
        >>> td.setdefault("a", torch.zeros(2)).tolist(), td.setdefault("a", torch.ones(2)).tolist()
        ([0.0, 0.0], [0.0, 0.0])
        """
        if self.get(key, MISSING) is MISSING:
            self.set(key, default)
        return self.get(key)

    # ------------------------------------------------------------------ writing

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

    def _copy_into(self, node: Any, path: tuple[str, ...], value: Any) -> Self:
        current = node._tensordict[path[-1]]
        if isinstance(current, Tensor):
            try:
                copy_leaf(current, value, path)
            except RuntimeError as err:
                raise BatchSizeError(f"cannot copy into {format_key(path)}: {err}") from None
        else:  # a non-tensor value or a node: on a saved tree, committed at once
            node._write(copy_other, node, path, value, current)
        return self

    def _node_for(self, path: tuple[str, ...]) -> TensorCollection:
        """The container that holds ``path[-1]``, creating missing levels."""
        plain = _ports.plain()
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

    def set_at_(
        self, key: NestedKey, value: Any, index: Any, *, non_blocking: bool = False
    ) -> Self:
        """Write ``value`` into the rows ``index`` of the existing entry ``key``, in place.

        ``index`` addresses this container's batch dims; ``value`` broadcasts to the
        selected rows (a tensor, a number, a container for a nested entry, or a value
        for a non-tensor entry). ``non_blocking`` is accepted for tensordict
        compatibility (copies between devices are synchronous).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=TensorDict(b=torch.zeros(2, 3), batch_size=[2, 3]), batch_size=[2])
        >>> td.set_at_(("a", "b"), torch.ones(3), 0)["a", "b"].sum().item()
        3.0
        """
        path = unravel_key(key)
        parent = entry_parent(self, path, "set_at_")
        # ``...`` spans this container's batch dims, not those of a deeper parent
        parent[normalize_index(index, len(self.batch_size))] = {path[-1]: value}
        return self

    def update(
        self,
        other: Mapping[Any, Any] | TensorCollection | None = None,
        clone: bool = False,
        inplace: bool = False,
        *,
        non_blocking: bool = False,
        keys_to_update: Sequence[NestedKey] | None = None,
        is_leaf: Callable[[type], bool] | None = None,
        update_batch_size: bool = False,
        **kwargs: Any,
    ) -> Self:
        """Merge ``other`` in, recursing into nested containers present on both sides.

        ``clone=True`` copies the incoming tensors; ``inplace=True`` writes into existing
        tensors; ``keys_to_update`` limits the merge to those keys (as tensordict, at the
        first level of a key this container lacks, the source's whole sub-container is
        copied). Keyword arguments are more entries (``td.update(b=x)``).

        A container ``other`` whose batch size contradicts this one's is refused
        (``BatchSizeError``), unless ``update_batch_size=True``: this container then
        takes ``other``'s batch size and entries, nested containers included (they
        stay the same objects). Every key here must then be in ``other``.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
        >>> td.update(TensorDict(a=torch.ones(4), batch_size=[4]), update_batch_size=True).batch_size
        torch.Size([4])
        """
        if type(other) is not dict and is_coll(other) and other is not self and not kwargs:
            if update_batch_size:
                self._write(_resize_update, self, other, inplace, keys_to_update)
                return self
            if self._batch_size[: other.batch_dims] != other.batch_size[: len(self._batch_size)]:
                raise BatchSizeError(
                    f"update: the source's batch_size {tuple(other.batch_size)} does not match "
                    f"this container's {tuple(self._batch_size)}; pass update_batch_size=True "
                    "to take the source's batch size"
                )
        if other is None or kwargs:
            other = {**(dict(other.items()) if is_coll(other) else other or {}), **kwargs}
        if clone:
            other = (
                other.clone()
                if is_coll(other)
                else _tree.new_plain({}, self._batch_size, None).update(other).clone()
            )
        if _TREES and id(self) in _TREES:  # a node of a saved tree: one commit
            args = (_keyops.update, self, other, inplace, keys_to_update)
            if inplace:  # tensors written through the mapping: all or nothing
                self._write_many(_written(self, other, keys_to_update, False), None, *args)
            else:  # entries replaced: the commit writes them, or memory is put back
                self._through(*args)
        else:  # the common case, without the gate's extra call
            _keyops.update(self, other, inplace, keys_to_update)  # type: ignore[arg-type]
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
        written = _written(self, other, keys_to_update, True)
        self._write_many(written, None, _keyops.update, self, other, True, keys_to_update, True)
        return self

    def update_at_(
        self,
        input_dict_or_td: Mapping[NestedKey, Any] | Any,
        idx: Any,
        clone: bool = False,
        *,
        non_blocking: bool = False,
        keys_to_update: Sequence[NestedKey] | None = None,
    ) -> Self:
        """Write every entry of ``input_dict_or_td`` into the rows ``idx`` of the entry
        with the same key here, in place; every key must already exist.

        ``keys_to_update`` restricts the write to those keys; ``clone`` copies the input
        tensors first (for an input that aliases this container).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3, 2), b=torch.zeros(3), batch_size=[3])
        >>> src = TensorDict(a=torch.ones(2), b=torch.tensor(2.0), batch_size=[])
        >>> td.update_at_(src, 1)["b"].tolist()
        [0.0, 2.0, 0.0]
        """
        wanted = None
        if keys_to_update is not None:
            wanted = {unravel_key(k) for k in keys_to_update}
            if not wanted:
                return self
        if is_container(input_dict_or_td):
            src: Any = input_dict_or_td
            if wanted is not None:
                have = {unravel_key(k) for k in src.keys(True)}
                src = src.select(*(k for k in wanted if k in have))
            if clone:
                src = src.clone()
            missing = [k for k in _tree.keys_list(src, True, True) if k not in self.keys(True)]
            if missing:
                raise TensorDictKeyError(
                    f"update_at_: key {format_key(unravel_key(missing[0]))} is not in the "
                    "destination; update_at_ writes into existing entries only (set() it first)"
                )
            self[idx] = src  # type: ignore[index]
            return self
        if not isinstance(input_dict_or_td, Mapping):
            raise TypeError(
                "update_at_: expected a TensorDict, a tensorclass or a mapping, got "
                f"{type(input_dict_or_td).__name__}"
            )
        items = [(unravel_key(k), v) for k, v in input_dict_or_td.items()]
        if wanted is not None:
            items = [(k, v) for k, v in items if any(k[: len(w)] == w for w in wanted)]
        for path, _ in items:  # every key checked before anything is written
            entry_parent(self, path, "update_at_")
        if clone:
            items = [
                (k, v.clone() if isinstance(v, Tensor) or is_container(v) else v) for k, v in items
            ]
        self._write_many(dict(items), idx, _set_all_at, self, items, idx)  # one commit
        return self

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

    def popitem(self) -> tuple[str, Any]:
        """Remove the entry set last at the top level and return ``(key, value)``, as
        ``dict.popitem`` (``KeyError`` when empty; refused on a locked container).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2))
        >>> td.popitem()[0], list(td.keys())
        ('b', ['a'])
        """
        if not self._tensordict:
            raise KeyError(f"popitem(): the {type(self).__name__} is empty")
        key = next(reversed(self._tensordict))
        return key, self.pop(key)

    def clear(self) -> Self:
        """Remove every entry (refused on a locked container).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), batch_size=[2])
        >>> list(td.clear().keys()), td.batch_size
        ([], torch.Size([2]))
        """
        self.exclude(*self.keys(), inplace=True)
        return self

    # ------------------------------------------------------- non-tensor entries

    def set_non_tensor(self, key: NestedKey, value: Any) -> Self:
        """Store ``value`` at ``key`` as non-tensor data, as it is (no conversion to a
        tensor); missing parents are created.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(batch_size=[2]).set_non_tensor(("meta", "n"), 3)
        >>> td.get_non_tensor(("meta", "n")), td.is_non_tensor(("meta", "n"))
        (3, True)
        """
        from tensorbox._core.nontensor import NonTensorData

        self.set(key, NonTensorData(value))
        return self

    def get_non_tensor(self, key: NestedKey, default: Any = MISSING) -> Any:
        """The value at ``key`` (a non-tensor's Python value; any other entry as ``get``
        gives it); ``default`` when missing, else a ``TensorDictKeyError``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(tag="train", batch_size=[]).get_non_tensor("tag")
        'train'
        """
        path = unravel_key(key)
        try:
            parent = entry_parent(self, path, "get_non_tensor")
        except TensorDictKeyError:
            if default is MISSING:
                raise TensorDictKeyError(
                    f"get_non_tensor: key {format_key(path)} not found"
                ) from None
            return default
        return parent._get_value(path[-1])

    def is_non_tensor(self, key: NestedKey) -> bool:
        """Whether the entry at ``key`` is non-tensor data (neither a tensor nor a
        container); a missing key raises ``TensorDictKeyError``.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), tag="train", batch_size=[2])
        >>> td.is_non_tensor("tag"), td.is_non_tensor("x")
        (True, False)
        """
        path = unravel_key(key)
        value = entry_parent(self, path, "is_non_tensor").get(path[-1])
        return not (isinstance(value, Tensor) or is_container(value))

    def filter_non_tensor_data(self) -> Self:
        """A copy without the non-tensor entries.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), tag="x", batch_size=[2])
        >>> list(td.filter_non_tensor_data().keys())
        ['a']
        """
        drop = [
            k
            for k, v in _tree.iter_items(self, True, True)  # type: ignore[arg-type]
            if type(v) is _NTD and type(v.data) is not UnbatchedTensor
        ]
        return self.exclude(*drop)

    # ----------------------------------------------------------------------------
    # tensordict's compatibility names: other spellings of methods of this job, and
    # stand-ins kept so that code written for tensordict runs unchanged. New code and
    # the docs use the names above.

    def copy_(self, other: Mapping[str, Any] | TensorCollection) -> Self:
        """Same as ``update_``."""
        return self.update_(other)

    def copy_at_(
        self, tensordict: Any, idx: Any, non_blocking: bool = False, *, fast: bool | None = True
    ) -> Self:
        """``update_at_`` under tensordict's copy-oriented name: write the entries of
        ``tensordict`` into the rows ``idx`` of the same entries here, in place.

        ``fast`` is accepted for compatibility: tensorbox has one path, which handles
        tensors and non-tensor values alike.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
        >>> td.copy_at_(TensorDict(a=torch.ones(2), batch_size=[2]), slice(1, 3))["a"].tolist()
        [0.0, 1.0, 1.0]
        """
        return self.update_at_(tensordict, idx, non_blocking=non_blocking)


def _key_order(key: Any) -> tuple[str, ...]:
    """Sort key of a nested key: its parts."""
    return (key,) if isinstance(key, str) else tuple(key)


def _has_leaf(td: Any) -> bool:
    """True when a tensor or non-tensor value lies somewhere below ``td``."""
    return any(not is_coll(v) or _has_leaf(v) for v in td._tensordict.values())


def _resize_update(td: Any, other: Any, inplace: bool, keys: Sequence[NestedKey] | None) -> None:
    """``update(other, update_batch_size=True)``: where the batch sizes differ, ``td``
    takes ``other``'s batch size and entries; nested containers present on both sides
    are merged the same way, and stay the same objects."""
    mine, theirs = tuple(td.batch_size), tuple(other.batch_size)
    if mine[: len(theirs)] == theirs[: len(mine)]:
        if inplace or keys is not None:  # nothing to resize here: a plain update
            _keyops.update(td, other, inplace, keys)
            return
    else:
        if inplace or keys is not None:
            raise BatchSizeError(
                f"update(update_batch_size=True): the batch sizes differ ({mine} here, "
                f"{theirs} in the source), so neither inplace=True nor keys_to_update can apply"
            )
        if td._locked:
            raise LockedError(f"update(update_batch_size=True): the container is locked{_UNLOCK}")
        extra = set(td.keys(True)) - set(other.keys(True))
        if extra:
            raise BatchSizeError(
                f"update(update_batch_size=True): key {format_key(unravel_key(next(iter(extra))))} "
                "is not in the source; every key here must be in it when the batch size changes"
            )
        # Leaves go (the source has them all); nested containers stay, resized below.
        td.exclude(*[k for k, v in td._tensordict.items() if not is_coll(v)], inplace=True)
        td._batch_size = other.batch_size
    store = td._tensordict
    for k, v in other._tensordict.items():
        cur = store.get(k)
        if cur is not None and is_coll(cur) and is_coll(v) and type(cur) is type(v):
            cur.update(v, update_batch_size=True)
        else:
            td._set_str(k, v, (k,))


def _written(td: Any, other: Any, keys: Any, strict: bool) -> Any:
    """What ``update(other, keys_to_update=keys)`` writes into ``td``."""
    return other if keys is None or other is None else _keyops.chosen(td, other, keys, strict)


def _set_all_at(td: Any, items: list[tuple[tuple[str, ...], Any]], idx: Any) -> None:
    for path, v in items:
        td.set_at_(path, v, idx)
