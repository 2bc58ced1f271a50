"""Write-through for tree-backed containers: every public write reaches the tree or raises.

A container returned by ``memmap(path)``, ``memmap_(path)``, ``memmap_like(path)`` or
``load_memmap(path)`` (``mode="r+"``, no ``device``) is *tree-backed*: each of its
nodes is registered here with the tree it belongs to. Tensor values written in place
reach the files through the mapping. Everything else a write can change (a key set,
replaced or deleted after ``unlock_()``; a non-tensor value replaced by ``set_``,
``update_`` or a row write ``td[idx] = ...``) lives in ``meta.json``: such a write is
made in memory, then the whole tree is committed at once (the save of
:mod:`tensorbox._storage.api`, which keeps every unchanged file by a hard link). When the
commit fails, the in-memory change is undone and the error propagates, so memory and
disk both keep the previous state.

Each tree remembers the :func:`generation` it last loaded or saved; a commit made
when another save has replaced the tree since raises instead of dropping that save.

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> path = tempfile.mkdtemp() + "/tree"
>>> td = TensorDict({"x": torch.zeros(2), "name": "a"}, [2]).memmap(path)
>>> td[1] = {"x": torch.tensor(1.0), "name": "b"}       # text per row: committed
>>> with td.unlock_():
...     td["y"] = torch.ones(2)                          # a new key: committed
>>> back = TensorDict.load_memmap(path)
>>> back["name"], sorted(back.keys())
(LinkedList(['a', 'b']), ['name', 'x', 'y'])

The registry is keyed by ``id`` with a weak reference to each node (containers are
unhashable: ``==`` is elementwise) and lives in :mod:`tensorbox._core.backing`, so
the container's write gates test it without importing this module.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tensorbox._core.backing import sync_open
from tensorbox._core.encoding import check_json_value
from tensorbox._core.nestedkey import format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll
from tensorbox._storage.backed import all_nodes, check_fresh, run, tree_of, unregister
from tensorbox._storage.save import Saver
from tensorbox._storage.store import Store

#: One node of a saved tree before a write: node, its dict, a copy, batch size, device.
_Snap = tuple[Any, dict[str, Any], dict[str, Any], Any, Any]

__all__ = ["commit", "guarded", "through", "write_rows"]


class _Active(threading.local):
    """Roots being written by ``through`` in this thread: inner writes (a ``rename_key_``
    is a pop and a set) join the outer commit."""

    def __init__(self) -> None:
        self.ids: set[int] = set()


_active = _Active()


def through(node: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run the write ``fn(*args)`` on a node of a tree, then commit the tree if anything
    that ``meta.json`` records changed; undo the change in memory when that fails."""
    found = tree_of(node)
    if found is None or id(found[0]) in _active.ids:
        return fn(*args)
    root, store, gen = found
    before = _snapshot(root)
    _active.ids.add(id(root))
    try:
        out = fn(*args)
        if _changed(before, root):
            commit(root, store, gen, before)
    except BaseException:
        _restore(before)
        raise
    finally:
        _active.ids.discard(id(root))
    return out


def commit(root: Any, store: Store, gen: Any, before: list[_Snap] | None = None, **kw: Any) -> None:
    """Save ``root`` into its own tree in ``store`` (one that commits in place), keeping
    each node's lock state.

    ``gen`` is the generation of the tree this container last loaded or saved: when
    another save has replaced the tree since, this one raises instead of dropping
    what that save wrote.
    """
    if before is None:
        before = _snapshot(root)
    locks = {id(node[0]): node[0]._locked for node in before}
    # An in-place save into its own tree; a leaf mapped elsewhere is copied into it.
    store = store.live("a write to a saved tree")
    saver = Saver(
        store,
        "inplace",
        True,
        kw.get("fsync", False),
        checksum=kw.get("checksum", False),
        layout=store.layout(),  # a tree in tensordict's layout stays in it
    )
    saver.place = False  # clear_device_() on a saved tree stays cleared
    run(saver, root, kw.get("num_threads", 0), expect=gen)  # registers the tree again, locks it
    _relock(root, locks, locks[id(root)])
    sync_open(root)
    now = {id(n) for n in all_nodes(root)}
    for node, *_ in before:  # a node deleted from the tree is an in-memory container now
        if id(node) not in now:
            unregister(node)


def write_rows(td: Any, index: Any, value: Any) -> None:
    """``td[index] = value`` on a node of a saved tree: every non-tensor value bound for a
    non-tensor entry is checked first, so a value the tree cannot hold raises before any
    row is written; a write that commits is all or nothing (see :func:`guarded`)."""
    from tensorbox._core.index import setitem_batch
    from tensorbox._storage.reserve import reserve_rows

    plan = _plan(td, value, ())
    reserve_rows(td, index)  # sparse files: a full disk is an OSError here, not a SIGBUS
    _guard(td, index, plan, setitem_batch, td, index, value)


def guarded(td: Any, value: Any, index: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)``: a write of the entries ``value`` (a mapping or a container) into
    the rows ``index`` (None: whole entries) of ``td``, a node of a saved tree
    (``update_``, ``update(..., inplace=True)``, ``update_at_``, a row write).

    A write that commits (a non-tensor value, a new key) writes its tensors through the
    mapping before the commit, which can still fail (a full disk, a read-only
    ``meta.json``): the tensors it overwrites are kept first and written back then, so
    the write that raised leaves neither half. A tree saved again since this container
    saw it raises before any byte is written. A write of tensors only keeps nothing.
    """
    return _guard(td, index, _plan(td, value, ()), fn, *args)


def _guard(
    td: Any,
    index: Any,
    plan: tuple[bool, list[tuple[str, ...]]],
    fn: Callable[..., Any],
    *args: Any,
) -> Any:
    commits, paths = plan
    found = tree_of(td)
    if not commits or found is None or id(found[0]) in _active.ids:
        return through(td, fn, *args)  # nothing to keep: no commit, or an outer write's
    check_fresh(found[1], found[2])  # one meta.json read, only for a write that commits
    index = ... if index is None else index
    old = td.select(*paths)[index].clone() if paths else None
    try:
        return through(td, fn, *args)
    except BaseException:
        if old is not None:
            _put_back(td, index, old)
        raise


def _put_back(td: Any, index: Any, old: Any) -> None:
    """Write the entries ``old`` back at ``index``, committing nothing (memory as it was)."""
    from tensorbox._core.index import setitem_batch

    found = tree_of(td)
    if found is None:
        return
    _active.ids.add(id(found[0]))  # joins no commit: the text entries are put back below
    before = _snapshot(found[0])
    try:
        setitem_batch(td, index, old)
    finally:
        _restore(before)
        _active.ids.discard(id(found[0]))


def _plan(td: Any, value: Any, path: tuple[str, ...]) -> tuple[bool, list[tuple[str, ...]]]:
    """What writing ``value`` into the node ``td`` does: whether it commits (a value for a
    non-tensor entry, each checked here; a key ``td`` lacks; a non-tensor value for a
    tensor, which a row write refuses midway) and the entries it writes in place."""
    store = value._tensordict if is_coll(value) else value if isinstance(value, Mapping) else {}
    commits, paths = False, []  # paths from the node the write began at
    for k, v in store.items():
        rel = unravel_key(k) if type(k) is tuple else (k,)
        node = td
        for part in rel[:-1]:
            node = node._tensordict.get(part) if is_coll(node) else None
        cur = node._tensordict.get(rel[-1]) if is_coll(node) else None
        full = (*path, *rel)
        if type(cur) is NonTensorData:
            data = v if type(v) is not NonTensorData else v.data
            data = data.tolist() if hasattr(data, "tolist") else data
            check_json_value(data, f"key {format_key(full)}")
            commits = True
        elif is_coll(cur) and (is_coll(v) or isinstance(v, Mapping)):
            sub_commits, sub_paths = _plan(cur, v, full)
            commits |= sub_commits
            paths += sub_paths
        elif cur is None:
            commits = True  # a new key
        else:  # a tensor, or a sub-container given one value for all its tensors
            paths.append(full)
            commits |= is_coll(v) or isinstance(v, (Mapping, str)) or type(v) is NonTensorData
    return commits, paths


def _relock(node: Any, locks: dict[int, bool], inherited: bool) -> None:
    flag = locks.get(id(node), inherited)
    node._locked = flag
    for v in node._tensordict.values():
        if is_coll(v):
            _relock(v, locks, flag)


def _snapshot(root: Any) -> list[_Snap]:
    """Each node with its entries dict, a shallow copy of it, its batch size and device."""
    return [
        (n, n._tensordict, dict(n._tensordict), n._batch_size, n._device) for n in all_nodes(root)
    ]


def _changed(before: list[_Snap], root: Any) -> bool:
    after = all_nodes(root)
    if len(after) != len(before):
        return True
    for (node, store, copy, bs, device), now in zip(before, after, strict=True):
        cur = now._tensordict
        if now is not node or cur is not store or cur.keys() != copy.keys():
            return True
        if now._batch_size != bs or now._device != device:
            return True
        if not all(map(operator.is_, cur.values(), copy.values())):
            return True
    return False


def _restore(before: list[_Snap]) -> None:
    for node, store, copy, bs, device in before:
        store.clear()
        store.update(copy)
        node._tensordict, node._batch_size, node._device = store, bs, device
