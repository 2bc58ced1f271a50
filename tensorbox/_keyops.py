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
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ._keys import NestedKey, unravel_key
from ._nontensor import NonTensorData
from ._ops import (
    _inner,
    _is_coll,
    _raw,
    _rewrap,
    _store,
    clone,
    copy_leaf,
    find_missing,
    missing_key_error,
    prepare_entry,
)
from .errors import KeyCollisionError, LockedError

if TYPE_CHECKING:
    from ._td import TensorDict

__all__ = ["exclude", "flatten_keys", "select", "unflatten_keys", "update"]

_NTD = NonTensorData


def update(
    td: TensorDict,
    other: Any,
    inplace: bool,
    keys: Sequence[NestedKey] | None,
    strict: bool = False,
) -> None:
    """Merge ``other`` into ``td``. ``inplace`` copies into existing tensors;
    ``strict`` (``update_``) also refuses keys ``td`` does not have."""
    if keys is not None:
        for key in keys:
            path = unravel_key(key)
            found, node, _ = _lookup_mapping(other, path)
            if not found:
                continue  # as tensordict: keys_to_update filters, it does not require
            if inplace and path in td:
                td.set_(path, _raw(node))
            elif strict:
                raise find_missing(td, path)
            else:
                td.set(path, _raw(node))
        return
    store = td._tensordict
    for k, v in (other if type(other) is dict else _store(other)).items():
        cur = store.get(k)
        if cur is None:
            if strict:
                raise missing_key_error(td, (k,), 0)
            td._set_str(k, v, (k,))
        elif isinstance(cur, Tensor):
            if inplace and not (_is_coll(v) or isinstance(v, Mapping) or type(v) is _NTD):
                copy_leaf(cur, v)
            else:
                td._set_str(k, v, (k,))
        elif type(cur) is not _NTD and (_is_coll(v) or isinstance(v, Mapping)):
            update(_inner(cur), v, inplace, None, strict)
        elif type(cur) is _NTD and inplace:
            store[k] = prepare_entry(td, k, v, (k,))
        else:
            td._set_str(k, v, (k,))


def _lookup_mapping(obj: Any, path: tuple[str, ...]) -> tuple[bool, Any, None]:
    node = obj
    for part in path:
        if not (_is_coll(node) or isinstance(node, Mapping)):
            return False, None, None
        store = _store(node)
        if part not in store:
            return False, None, None
        node = store[part]
    return True, node, None


def _lookup(td: TensorDict, path: tuple[str, ...]) -> tuple[bool, Any, list[Any]]:
    """(found, stored entry, the containers along the way)."""
    node: Any = td
    chain = []
    for part in path:
        if not _is_coll(node):
            return False, None, chain
        chain.append(node)
        store = _inner(node)._tensordict
        if part not in store:
            return False, None, chain
        node = store[part]
    return True, node, chain


def select(td: TensorDict, keys: Sequence[NestedKey], inplace: bool, strict: bool) -> TensorDict:
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


def _all_str(keys: Sequence[Any]) -> bool:
    for k in keys:  # noqa: SIM110 (a loop: cheaper than all() over a generator)
        if type(k) is not str:
            return False
    return True


def _select_nested(td: TensorDict, keys: Sequence[NestedKey], strict: bool) -> dict[str, Any]:
    out = td._new_unsafe({}, td._batch_size, td._device)
    for key in keys:
        path = unravel_key(key)
        found, entry, chain = _lookup(td, path)
        if not found:
            if strict:
                raise find_missing(td, path)
            continue
        dest = out
        for part, src in zip(path[:-1], chain[1:]):
            nxt = dest._tensordict.get(part)
            if nxt is None:
                inner = _inner(src)
                nxt = td._new_unsafe({}, inner._batch_size, inner._device)
                dest._tensordict[part] = nxt
            dest = nxt
        dest._tensordict[path[-1]] = entry
    # Selected sub-containers of a tensorclass come back as that tensorclass.
    return {k: _rewrap_like(td._tensordict[k], v) for k, v in out._tensordict.items()}


def _rewrap_like(src: Any, sel: Any) -> Any:
    if isinstance(src, Tensor) or type(src) is _NTD or sel is src:
        return sel
    store = _inner(src)._tensordict
    sel._tensordict = {k: _rewrap_like(store[k], v) for k, v in sel._tensordict.items()}
    return _rewrap(src, sel)


def exclude(td: TensorDict, keys: Sequence[NestedKey], inplace: bool) -> TensorDict:
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
            del _inner(chain[-1])._tensordict[path[-1]]
    return res


def flatten_keys(td: TensorDict, sep: str) -> TensorDict:
    out: dict[str, Any] = {}

    def walk(node: TensorDict, prefix: str) -> None:
        for k, v in node._tensordict.items():
            name = f"{prefix}{sep}{k}" if prefix else k
            if not (isinstance(v, Tensor) or type(v) is _NTD) and _inner(v)._tensordict:
                walk(_inner(v), name)
                continue
            if name in out:
                raise KeyCollisionError(
                    f"flatten_keys: two entries become {name!r} with separator {sep!r}; "
                    "rename one, or pick a separator that no key contains"
                )
            out[name] = v

    walk(td, "")
    return td._new_unsafe(out, td._batch_size, td._device)


def unflatten_keys(td: TensorDict, sep: str) -> TensorDict:
    out = td._new_unsafe({}, td._batch_size, td._device)
    for k, v in td._tensordict.items():
        if _is_coll(v):
            v = _rewrap(v, unflatten_keys(_inner(v), sep))
        path = tuple(k.split(sep))
        dest = out
        for i, part in enumerate(path[:-1]):
            nxt = dest._tensordict.get(part)
            if nxt is None:
                nxt = td._new_unsafe({}, td._batch_size, td._device)
                dest._tensordict[part] = nxt
            elif not _is_coll(nxt):
                raise KeyCollisionError(
                    f"unflatten_keys: {k!r} needs {sep.join(path[: i + 1])!r} to be a "
                    "TensorDict but it is a leaf"
                )
            dest = _inner(nxt)
        last = path[-1]
        if last in dest._tensordict:
            prev = dest._tensordict[last]
            if _is_coll(prev) and _is_coll(v):
                for kk, vv in _inner(v)._tensordict.items():
                    if kk in _inner(prev)._tensordict:
                        raise KeyCollisionError(
                            f"unflatten_keys: {k!r} and another key both give {(*path, kk)!r}"
                        )
                    _inner(prev)._tensordict[kk] = vv
                continue
            raise KeyCollisionError(
                f"unflatten_keys: {k!r} gives {path!r}, which another key already holds"
            )
        dest._tensordict[last] = v
    return out
