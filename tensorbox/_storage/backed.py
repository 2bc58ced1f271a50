"""Containers backed by saved trees: which tree each node belongs to, and saves that make one.

A container returned by a save or a ``load_memmap(path)`` (``mode="r+"``, no
``device``) is *tree-backed*: :func:`register` records each of its nodes in the
core's registry (:mod:`tensorbox._core.backing`) with the tree's path and the
:func:`generation` of the tree it last loaded or saved. :func:`run` runs a save under
the tree's writer lock and registers what it saved; write-through
(:mod:`tensorbox._storage.writethrough`) and ``extend_`` save through it.

The registry is keyed by ``id`` with a weak reference to each node (containers are
unhashable: ``==`` is elementwise).
"""

from __future__ import annotations

import contextlib
import weakref
import zlib
from typing import Any

from torch import Tensor

from tensorbox._core.backing import OPEN, TREES
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll
from tensorbox._storage import commit as _commit
from tensorbox._storage.folder import FolderStore
from tensorbox._storage.format.metafile import read_meta_bytes
from tensorbox._storage.format.names import encode_key
from tensorbox._storage.format.spec import META
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.save import Saver

__all__ = ["all_nodes", "generation", "register", "run", "tree_of", "unregister"]

_LEAVES = frozenset((Tensor, MemoryMappedTensor, NonTensorData))


def generation(path: str) -> tuple[int, int] | None:
    """What identifies the tree now at ``path``: its root ``meta.json``'s size and CRC-32.
    That file holds the random ids of the tree's files, so two saves differ there (None:
    no tree). A checksum, not a file identity: inode numbers are reused."""
    try:
        data = read_meta_bytes(path, f"{path}/{META}")
    except (OSError, ValueError):
        return None
    return len(data), zlib.crc32(data)


class _Record:
    __slots__ = ("dir", "gen", "node", "root", "root_path")

    def __init__(
        self,
        node: Any,
        directory: str,
        root: Any,
        root_path: str,
        gen: list[tuple[int, int] | None],
    ) -> None:
        key = id(node)

        def gone(ref: Any, key: int = key) -> None:
            if TREES.get(key) is self:
                del TREES[key]
                OPEN.discard(key)

        self.node = weakref.ref(node, gone)
        self.dir = directory
        self.root = weakref.ref(root)
        self.root_path = root_path
        self.gen = gen  # one cell per tree, shared by its nodes: updated by each commit


def _nodes(root: Any, directory: str) -> list[tuple[Any, str]]:
    """Every node of the container ``root`` with its directory (the format's names)."""
    out, todo = [], [(root, directory)]
    while todo:
        node, d = todo.pop()
        out.append((node, d))
        for k, v in node._tensordict.items():
            if type(v) not in _LEAVES and is_coll(v):
                todo.append((v, f"{d}/{encode_key(k, node=True)}"))
    return out


def register(root: Any, path: str, gen: tuple[int, int] | None) -> None:
    """Mark every node of ``root`` as part of the tree saved at ``path``, whose
    :func:`generation` is ``gen``."""
    cell = [gen]
    for node, d in _nodes(root, path):
        TREES[id(node)] = _Record(node, d, root, path, cell)
        (OPEN.discard if node._locked else OPEN.add)(id(node))


def unregister(obj: Any) -> None:
    for node in all_nodes(obj):
        rec = TREES.get(id(node))
        if rec is not None and rec.node() is node:
            del TREES[id(node)]
            OPEN.discard(id(node))


def tree_of(node: Any) -> tuple[Any, str, tuple[int, int] | None] | None:
    """(root container, its path, the generation it last saw) of the tree ``node``
    belongs to, or None."""
    rec = TREES.get(id(node))
    if rec is None or rec.node() is not node:
        return None
    root = rec.root()
    if root is None:  # the root container is gone: this node's folder is a tree of its own
        return node, rec.dir, None
    return root, rec.root_path, rec.gen[0]


def all_nodes(root: Any) -> list[Any]:
    out, todo = [], [root]
    while todo:
        node = todo.pop()
        out.append(node)
        todo.extend(v for v in node._tensordict.values() if type(v) not in _LEAVES and is_coll(v))
    return out


def run(
    saver: Saver,
    obj: Any,
    num_threads: int,
    *,
    held: bool = False,
    expect: tuple[int, int] | None = None,
) -> Any:
    """Run ``saver`` under its store's writer lock (``held``: the caller has it); the
    saved container, locked, registered as backed by its tree when that is a folder.
    ``expect`` is the generation a write-through saves over (refused if replaced)."""
    store = saver.store
    if store is None:
        return saver.run(obj, num_threads).lock_()
    root = saver.root
    assert root is not None
    folder = isinstance(store, FolderStore)
    lock = contextlib.nullcontext() if held else _commit.writing(root, file=not folder)
    with lock:  # one writer at a time at this path
        if expect is not None and generation(root) != expect:
            raise RuntimeError(
                f"the tree at {root!r} was saved again since this container was "
                "loaded or saved: its changes would drop that save's. Load it again "
                "and repeat the write, or call memmap_(path) to replace that tree "
                "with this container"
            )
        result = saver.run(obj, num_threads)
        gen = generation(root) if folder else None  # this one, while locked
    result.lock_()
    if folder:
        register(result, root, gen)
    saver.gen = gen
    return result
