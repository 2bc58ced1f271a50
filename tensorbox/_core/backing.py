"""Which containers are backed by a saved tree, and the hook their writes go through.

A container returned by ``memmap(path)`` or ``load_memmap(path)`` is *backed*: the
storage layer registers each of its nodes here, in ``TREES`` (by ``id``: containers
are unhashable, ``==`` is elementwise). The container's write gates (``_set_str``,
``_write``, a row write ``td[idx] = ...``, ``_set_lock``) and the tensorclass
``__setattr__`` test these registries first: while no tree is open they cost one
empty-dict or empty-set test. A write to a backed node is handed to the backing
hook, which makes it and commits the tree, or undoes it and raises.

The core knows only this module: the registries and the hook's interface
(:class:`Backing`, a port of :mod:`tensorbox._core.ports`). The storage layer
implements the hook (:mod:`tensorbox._storage.writethrough`) and fills the registries;
the package face binds the port to it, loaded on the first write to a saved tree.
:func:`install` puts another implementation in its place.

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(x=torch.zeros(2), batch_size=[2])
>>> id(td) in TREES
False
>>> path = tempfile.mkdtemp() + "/tree"
>>> saved = td.memmap(path)
>>> id(saved) in TREES                       # saved: each node registered
True
>>> with saved.unlock_():
...     saved["y"] = torch.ones(2)  # a new key on a backed node: committed at once
>>> sorted(TensorDict.load_memmap(path).keys()), hook() is not None
(['x', 'y'], True)
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from tensorbox._core import ports
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.ports import Backing
from tensorbox._core.tree import is_coll

__all__ = ["OPEN", "TREES", "UNLOCK", "Backing", "hook", "install", "sync_open"]

#: The nodes of tree-backed containers, by ``id``, each with the storage layer's record
#: of its tree (filled by the storage layer). The container's write gates test it first.
TREES: dict[int, Any] = {}
#: The ids of those nodes that are unlocked now: ``td[key] = v`` on an unlocked container
#: looks here, so an in-memory container pays one empty-set test while no tree is unlocked.
OPEN: set[int] = set()

#: How a locked error ends: the way on, and what it does to a saved tree.
UNLOCK = ": unlock_() first (on a saved tree, each change is then saved to it at once)"

_LEAVES = frozenset((Tensor, NonTensorData))  # skipped by type, before the slower test


def install(backing: Backing) -> None:
    """Make ``backing`` the hook the write gates call (the storage layer's, by default)."""
    ports.install("backing", backing)


def hook() -> Backing | None:
    """The hook in use, or None before the first write to a saved tree loads it."""
    found: Backing | None = ports.bound("backing")
    return found


def sync_open(td: Any) -> None:
    """Record which nodes of saved trees under ``td`` are unlocked (after a lock change)."""
    todo = [td]
    while todo:
        node = todo.pop()
        if id(node) in TREES:
            (OPEN.discard if node._locked else OPEN.add)(id(node))
        for v in node._tensordict.values():
            if type(v) not in _LEAVES and not isinstance(v, Tensor) and is_coll(v):
                todo.append(v)
