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
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll
from tensorbox._storage.backed import all_nodes, run, tree_of, unregister
from tensorbox._storage.save import Saver
from tensorbox._storage.store import Store

#: One node of a saved tree before a write: node, its dict, a copy, batch size, device.
_Snap = tuple[Any, dict[str, Any], dict[str, Any], Any, Any]

__all__ = ["commit", "through", "write_rows"]


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
    row is written; a changed one is then committed with the rows."""
    from tensorbox._core.index import setitem_batch
    from tensorbox._storage.reserve import reserve_rows

    texts = (is_coll(value) or isinstance(value, Mapping)) and _check_values(td, value, ())
    reserve_rows(td, index)  # sparse files: a full disk is an OSError here, not a SIGBUS
    if not texts:
        through(td, setitem_batch, td, index, value)  # tensors only: nothing to commit
        return
    # The rows' tensors go through the mapping before the commit of the text, which can
    # still fail (another save since, a full disk): then they are written back as they
    # were, so that the write that raised leaves neither half of the row.
    old = td[index].clone()
    try:
        through(td, setitem_batch, td, index, value)
    except BaseException:
        _put_back(td, index, old)
        raise


def _put_back(td: Any, index: Any, old: Any) -> None:
    """Write the rows ``old`` back at ``index``, committing nothing (memory as it was)."""
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


def _check_values(td: Any, value: Any, path: tuple[str, ...]) -> bool:
    """Check every non-tensor value bound for a non-tensor entry; True if there is one."""
    store = value._tensordict if is_coll(value) else value if isinstance(value, Mapping) else {}
    texts = False
    for k, v in store.items():
        cur = td._tensordict.get(k)
        if type(cur) is NonTensorData:
            data = v if type(v) is not NonTensorData else v.data
            data = data.tolist() if hasattr(data, "tolist") else data
            check_json_value(data, f"key {format_key((*path, k))}")
            texts = True
        elif is_coll(cur):
            texts |= _check_values(cur, v, (*path, k))
    return texts


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
