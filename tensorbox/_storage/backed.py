"""Containers backed by saved trees: which tree each node belongs to, and saves that make one.

A container returned by a save or a ``load_memmap(path)`` (``mode="r+"``, no
``device``) of a store that commits in place (a folder; any store with
:attr:`~tensorbox._storage.store.Store.in_place`) is *tree-backed*: :func:`register`
records each of its nodes in the core's registry (:mod:`tensorbox._core.backing`) with
the tree's store and the generation (:meth:`~tensorbox._storage.store.Store.generation`)
of the tree it last loaded or saved. :func:`run` runs a save under the store's writer
lock and registers what it saved; write-through (:mod:`tensorbox._storage.writethrough`)
and ``extend_`` save through it. Nothing here knows a folder or a path.

The registry is keyed by ``id`` with a weak reference to each node (containers are
unhashable: ``==`` is elementwise).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from torch import Tensor

from tensorbox._core.backing import OPEN, TREES
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll
from tensorbox._storage.format.names import encode_key
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.save import Saver
from tensorbox._storage.store import Store

__all__ = ["all_nodes", "check_fresh", "register", "run", "tree_of", "unregister"]

_LEAVES = frozenset((Tensor, MemoryMappedTensor, NonTensorData))


class _Record:
    """One node of a live tree: the node (weakly), its tree's store and root container,
    its path in the tree, and the generation its tree last saw."""

    __slots__ = ("gen", "node", "rel", "root", "store")

    def __init__(self, node: Any, store: Store, rel: str, root: Any, gen: list[Any]) -> None:
        key = id(node)

        def gone(ref: Any, key: int = key) -> None:
            if TREES.get(key) is self:
                del TREES[key]
                OPEN.discard(key)

        self.node = weakref.ref(node, gone)
        self.store = store
        self.rel = rel
        self.root = weakref.ref(root)
        self.gen = gen  # one cell per tree, shared by its nodes: updated by each commit

    @property
    def dir(self) -> str:
        """The node as its store shows it (a folder's: the node's directory)."""
        return self.store.where(self.rel)

    @property
    def root_path(self) -> str:
        return self.store.name


def _nodes(root: Any) -> list[tuple[Any, str]]:
    """Every node of the container ``root`` with its path in the tree (the format's names)."""
    out, todo = [], [(root, "")]
    while todo:
        node, rel = todo.pop()
        out.append((node, rel))
        for k, v in node._tensordict.items():
            if type(v) not in _LEAVES and is_coll(v):
                name = encode_key(k, node=True)
                todo.append((v, f"{rel}/{name}" if rel else name))
    return out


def register(root: Any, store: Store, gen: Any) -> None:
    """Mark every node of ``root`` as part of the live tree in ``store`` (one that commits
    in place: :attr:`~tensorbox._storage.store.Store.in_place`), whose generation is ``gen``."""
    cell = [gen]
    for node, rel in _nodes(root):
        TREES[id(node)] = _Record(node, store, rel, root, cell)
        (OPEN.discard if node._locked else OPEN.add)(id(node))


def unregister(obj: Any) -> None:
    for node in all_nodes(obj):
        rec = TREES.get(id(node))
        if rec is not None and rec.node() is node:
            del TREES[id(node)]
            OPEN.discard(id(node))


def tree_of(node: Any) -> tuple[Any, Store, Any] | None:
    """(root container, its tree's store, the generation it last saw) of the live tree
    ``node`` belongs to, or None."""
    rec = TREES.get(id(node))
    if rec is None or rec.node() is not node:
        return None
    root = rec.root()
    if root is None:  # the root container is gone: this node is a tree of its own
        return node, rec.store.subtree(rec.rel), None
    return root, rec.store, rec.gen[0]


def all_nodes(root: Any) -> list[Any]:
    out, todo = [], [root]
    while todo:
        node = todo.pop()
        out.append(node)
        todo.extend(v for v in node._tensordict.values() if type(v) not in _LEAVES and is_coll(v))
    return out


def check_fresh(store: Store, expect: Any) -> None:
    """Refuse a write-through to the tree in ``store`` when it is no longer the
    generation ``expect`` (None: nothing to compare) that the container last saw."""
    if expect is not None and store.generation() != expect:
        raise RuntimeError(
            f"the tree at {store.name!r} was saved again since this container was "
            "loaded or saved: its changes would drop that save's. Load it again "
            "and repeat the write, or call memmap_(path) to replace that tree "
            "with this container"
        )


def run(
    saver: Saver,
    obj: Any,
    num_threads: int,
    *,
    held: bool = False,
    expect: Any = None,
) -> Any:
    """Run ``saver`` under its store's writer lock (``held``: the caller has it); the
    saved container, locked, registered as backed by its tree when the store commits in
    place. ``expect`` is the generation a write-through saves over (refused if replaced)."""
    store = saver.store
    if store is None:
        return saver.run(obj, num_threads).lock_()
    live = store.in_place
    with contextlib.nullcontext() if held else store.writing():  # one writer at a time
        check_fresh(store, expect)
        result = saver.run(obj, num_threads)
        gen = store.generation() if live else None  # this one, while locked
    result.lock_()
    if live:
        register(result, store, gen)
    saver.gen = gen
    return result
