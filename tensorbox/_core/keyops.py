"""Key-structure operations: update, select, exclude, flatten_keys, unflatten_keys.

Keys may be nested (tuples); selected or kept entries are shared with the source
(no tensor is copied), and new levels are created only along the paths that need
them.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2), "c": torch.ones(2)}}, [2])
>>> td.select(("n", "b")).keys(include_nested=True)
['n', ('n', 'b')]
>>> td.exclude("a", ("n", "c")).flatten_keys("/").keys()
dict_keys(['n/b'])
>>> td.update({"n": {"d": torch.zeros(2)}})["n"].keys()
dict_keys(['b', 'c', 'd'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

from torch import Tensor

from tensorbox._core import ports as _ports
from tensorbox._core.apply import clone
from tensorbox._core.entries import copy_leaf, replace_value
from tensorbox._core.nestedkey import NestedKey, unravel_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import find_missing, is_coll, missing_key_error, new_plain, raw, store_of
from tensorbox.errors import KeyCollisionError, LockedError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection
    from tensorbox._core.methods.base import C, MixinBase

__all__ = ["chosen", "exclude", "flatten_keys", "select", "unflatten_keys", "update"]

_NTD = NonTensorData

# Entries that describe their node's other entries (the tabular bridges' column record,
# ``"__columns__"``) are bound by the package face as the ports ``"merge.<key>"``
# (``ports.MERGED`` holds their keys): ``update`` merges them with ``merge(old, new, keys
# the update set)`` (the raw values, ``None`` where absent; the result ``None`` deletes
# the entry) instead of replacing the old record with the new.
_MERGED = _ports.MERGED


def update(
    td: TensorCollection,
    other: Any,
    inplace: bool,
    keys: Sequence[NestedKey] | None,
    strict: bool = False,
) -> None:
    """Merge ``other`` into ``td``. ``inplace`` copies into existing tensors;
    ``strict`` (``update_``) also refuses keys ``td`` does not have."""
    if keys is not None:
        touched: dict[tuple[str, ...], set[str]] = {}
        for path, node in chosen(td, other, keys, strict).items():
            _set_path(td, path, raw(node), inplace, strict)
            touched.setdefault(path[:-1], set()).add(path[-1])
        for parent, names in touched.items() if _MERGED else ():
            _merge_records_at(td, other, parent, names)
        return
    store = td._tensordict
    items = other if type(other) is dict else store_of(other)
    for k in _MERGED:  # rare: an entry that describes the others, on either side
        if k in store or k in items:
            _update_with_records(td, store, items, inplace, strict)
            return
    _update_entries(td, store, items, inplace, strict)


def _update_with_records(
    td: Any, store: dict[str, Any], items: Any, inplace: bool, strict: bool
) -> None:
    """``update`` where entries that describe the others take part: they are merged
    through their port after the rest, not set as entries."""
    records = {k: (store.get(k), items.get(k)) for k in _MERGED if k in store or k in items}
    items = {k: v for k, v in items.items() if k not in records}
    _update_entries(td, store, items, inplace, strict)
    for k, (old, new) in records.items():  # one record of the columns of both sides
        merged = _ports.port(f"merge.{k}")(old, new, set(items))
        if merged is None:
            store.pop(k, None)
        else:
            td._set_str(k, merged, (k,))


def _merge_records_at(td: Any, other: Any, parent: tuple[str, ...], names: set[str]) -> None:
    """After ``update(keys_to_update=...)``: the records of the node at ``parent`` take
    ``other``'s for the entries ``names`` set (a record named itself was copied as asked)."""
    found, node, _ = _lookup(td, parent) if parent else (True, td, [])
    if not found or not is_coll(node):
        return
    _, theirs, _ = _lookup_mapping(other, parent) if parent else (True, other, None)
    their_store = store_of(theirs) if is_coll(theirs) or isinstance(theirs, Mapping) else {}
    for k in _MERGED:
        old, new = node._tensordict.get(k), their_store.get(k)
        if k in names or (old is None and new is None):
            continue
        merged = _ports.port(f"merge.{k}")(old, new, names)
        if merged is None:
            node._tensordict.pop(k, None)
        else:
            node._set_str(k, merged, (k,))


def _update_entries(
    td: Any, store: dict[str, Any], items: Any, inplace: bool, strict: bool
) -> None:
    for k, v in items.items():
        if type(k) is tuple:  # {("a", "b"): x}: a nested entry, as in tensordict
            path = unravel_key(k)
            if len(path) > 1:
                _set_path(td, path, raw(v), inplace, strict)
                continue
            k = path[0]
        cur = store.get(k)
        if cur is None:
            if strict:
                raise missing_key_error(td, (k,), 0)
            td._set_str(k, v, (k,))
        elif isinstance(cur, Tensor):
            if inplace and not (is_coll(v) or isinstance(v, Mapping) or type(v) is _NTD):
                copy_leaf(cur, v, (k,))
            else:
                td._set_str(k, v, (k,))
        elif type(cur) is not _NTD and (is_coll(v) or isinstance(v, Mapping)):
            update(cur, v, inplace, None, strict)
        elif type(cur) is _NTD and inplace:
            store[k] = replace_value(td, k, v, (k,))
        else:
            td._set_str(k, v, (k,))


def chosen(
    td: Any, other: Any, keys: Sequence[NestedKey], strict: bool
) -> dict[tuple[str, ...], Any]:
    """The entries of ``other`` that ``update(other, keys_to_update=keys)`` writes into
    ``td``, by path (as tensordict: ``keys`` filters, it does not require; without
    ``strict``, a level ``td`` lacks is taken whole)."""
    out = {}
    for key in keys:
        path = unravel_key(key)
        if not strict:
            path = next((path[:i] for i in range(1, len(path)) if not _has(td, path[:i])), path)
        found, node, _ = _lookup_mapping(other, path)
        if found:
            out[path] = node
    return out


def _set_path(td: Any, path: tuple[str, ...], value: Any, inplace: bool, strict: bool) -> None:
    """One nested entry of an update: copied in place, refused (``strict``) or set."""
    if inplace and path in td:
        td.set_(path, value)
    elif strict:
        raise find_missing(td, path)
    else:
        td.set(path, value)


def _has(td: Any, path: tuple[str, ...]) -> bool:
    return _lookup(td, path)[0]


def _lookup_mapping(obj: Any, path: tuple[str, ...]) -> tuple[bool, Any, None]:
    node = obj
    for part in path:
        if not (is_coll(node) or isinstance(node, Mapping)):
            return False, None, None
        store = store_of(node)
        if part not in store:
            return False, None, None
        node = store[part]
    return True, node, None


def _lookup(td: MixinBase, path: tuple[str, ...]) -> tuple[bool, Any, list[Any]]:
    """(found, stored entry, the containers along the way)."""
    node: Any = td
    chain: list[Any] = []
    for part in path:
        if not is_coll(node):
            return False, None, chain
        chain.append(node)
        store = node._tensordict
        if part not in store:
            return False, None, chain
        node = store[part]
    return True, node, chain


def select(td: C, keys: Sequence[NestedKey], inplace: bool, strict: bool) -> C:
    store = td._tensordict
    if _all_str(keys):
        if strict:
            try:
                out = {k: store[k] for k in keys}
            except KeyError:
                missing = next(k for k in keys if k not in store)
                raise missing_key_error(td, (missing,), 0) from None
        else:
            out = {k: store[k] for k in keys if k in store}
    else:
        out = _select_nested(td, keys, strict)
    if inplace:
        if td._locked:
            raise LockedError("select(inplace=True) on a locked TensorDict: unlock_() first")
        td._tensordict = out
        return td
    return td._new_unsafe(out, td._batch_size, td._device)


def _all_str(keys: Sequence[Any]) -> TypeGuard[Sequence[str]]:
    for k in keys:  # noqa: SIM110 (a loop: cheaper than all() over a generator)
        if type(k) is not str:
            return False
    return True


def _select_nested(td: MixinBase, keys: Sequence[NestedKey], strict: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        path = unravel_key(key)
        found, entry, chain = _lookup(td, path)
        if not found:
            if strict:
                raise find_missing(td, path)
            continue
        dest = out
        for part, src in zip(path[:-1], chain[1:]):
            nxt = dest.get(part)
            if nxt is None:  # a partial copy of the level, of the level's own type
                nxt = dest[part] = type(src)._new_unsafe({}, src._batch_size, src._device)
            dest = nxt._tensordict
        dest[path[-1]] = entry
    return out


def exclude(td: C, keys: Sequence[NestedKey], inplace: bool) -> C:
    if inplace and td._locked:
        raise LockedError("exclude(inplace=True) on a locked TensorDict: unlock_() first")
    if _all_str(keys):
        drop = set(keys)
        out = {k: v for k, v in td._tensordict.items() if k not in drop}
        if inplace:
            td._tensordict = out
            return td
        return td._new_unsafe(out, td._batch_size, td._device)
    res = td if inplace else clone(td, False)
    for key in keys:
        path = unravel_key(key)
        found, _, chain = _lookup(res, path)
        if found:
            del chain[-1]._tensordict[path[-1]]
    return res


def flatten_keys(td: C, sep: str) -> C:
    out: dict[str, Any] = {}

    def walk(node: MixinBase, prefix: str) -> None:
        for k, v in node._tensordict.items():
            name = f"{prefix}{sep}{k}" if prefix else k
            if not (isinstance(v, Tensor) or type(v) is _NTD) and v._tensordict:
                walk(v, name)
                continue
            if name in out:
                raise KeyCollisionError(
                    f"flatten_keys: two entries become {name!r} with separator {sep!r}; "
                    "rename one, or pick a separator that no key contains"
                )
            out[name] = v

    walk(td, "")
    return td._new_unsafe(out, td._batch_size, td._device)


def unflatten_keys(td: C, sep: str) -> C:
    out = td._new_unsafe({}, td._batch_size, td._device)
    for k, v in td._tensordict.items():
        if is_coll(v):
            v = unflatten_keys(v, sep)
        path = tuple(k.split(sep))
        dest: MixinBase = out
        for i, part in enumerate(path[:-1]):
            nxt = dest._tensordict.get(part)
            if nxt is None:
                nxt = new_plain({}, td._batch_size, td._device)
                dest._tensordict[part] = nxt
            elif not is_coll(nxt):
                raise KeyCollisionError(
                    f"unflatten_keys: {k!r} needs {sep.join(path[: i + 1])!r} to be a "
                    "TensorDict but it is a leaf"
                )
            dest = nxt
        last = path[-1]
        if last in dest._tensordict:
            prev = dest._tensordict[last]
            if is_coll(prev) and is_coll(v):
                for kk, vv in v._tensordict.items():
                    if kk in prev._tensordict:
                        raise KeyCollisionError(
                            f"unflatten_keys: {k!r} and another key both give {(*path, kk)!r}"
                        )
                    prev._tensordict[kk] = vv
                continue
            raise KeyCollisionError(
                f"unflatten_keys: {k!r} gives {path!r}, which another key already holds"
            )
        dest._tensordict[last] = v
    return out
