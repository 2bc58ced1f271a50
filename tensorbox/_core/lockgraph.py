"""The lock graph: a container held by a locked parent cannot be unlocked on its own.

tensordict's rule, kept so that code written for it behaves the same: ``lock_()`` records,
in every nested container, weak references to the containers above it
(``_lock_parents_weakrefs``: its parent, the parent's parent... up to the one locked). ``unlock_()`` of a container refuses while any container of
its subtree is still held by a locked parent outside that subtree: unlocking the child
would let the locked parent's entries change. The references are weak, so a child never
keeps a parent alive: once the parent is gone the child unlocks freely. Unlocking the
root of the graph unlocks everything and forgets the references inside it.

Only ``lock_()``/``unlock_()`` (and ``is_locked = ...``, ``with td.lock_():``) maintain
the graph; locks set in one pass by the library (``TensorDict(..., lock=True)``,
``consolidate``) record no parents.

>>> import torch; from tensorbox import TensorDict
>>> td = TensorDict({"a": {"b": torch.zeros(2)}}, batch_size=[2]).lock_()
>>> child = td["a"]
>>> try:
...     child.unlock_()
... except RuntimeError as e:
...     print(type(e).__name__)
LockedError
>>> td.unlock_() is td and not child.is_locked
True
"""

from __future__ import annotations

import weakref
from typing import Any

from tensorbox._core.tree import is_coll
from tensorbox.errors import LockedError

__all__ = ["forget", "nodes", "record"]

_ATTR = "_lock_parents_weakrefs"


def nodes(td: Any) -> list[Any]:
    """``td`` and every container below it that holds its entries in a plain dict (views
    compute theirs on each read: they carry no graph)."""
    out = [td]
    seen = {id(td)}
    i = 0
    while i < len(out):
        entries = out[i]._tensordict
        i += 1
        if type(entries) is not dict:
            continue
        for v in entries.values():
            if is_coll(v) and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


def record(td: Any) -> None:
    """After ``td`` was locked: every nested container remembers each locked container
    above it (its parent, the parent's parent, ... up to ``td``), as tensordict does."""
    if getattr(td, _ATTR, None) is None:
        object.__setattr__(td, _ATTR, [])
    stack: list[tuple[Any, tuple[Any, ...]]] = [(td, ())]
    seen = {id(td)}
    while stack:
        parent, above = stack.pop()
        entries = parent._tensordict
        if type(entries) is not dict:
            continue
        chain = (*above, weakref.ref(parent))
        for v in entries.values():
            if not is_coll(v) or type(v._tensordict) is not dict:
                continue
            refs = getattr(v, _ATTR, None)
            if refs is None:
                refs = []
                object.__setattr__(v, _ATTR, refs)
            for ref in chain:
                target = ref()
                if not any(r() is target for r in refs):
                    refs.append(ref)
            if id(v) not in seen:
                seen.add(id(v))
                stack.append((v, chain))


def forget(td: Any) -> None:
    """Before ``td`` is unlocked: refuse when a container of its subtree is held by a
    locked container outside it; else drop the references the subtree's own nodes hold."""
    below = nodes(td)
    inside = {id(n) for n in below}
    for node in below:
        for r in getattr(node, _ATTR, None) or ():
            p = r()
            if p is not None and id(p) not in inside and p.is_locked:
                what = "it" if node is td else "a container inside it"
                raise LockedError(
                    f"cannot unlock this {type(td).__name__}: {what} is held by a locked "
                    f"{type(p).__name__} (part of a locked graph); unlock that container, "
                    "the root of the graph, instead"
                )
    for node in below:
        refs = getattr(node, _ATTR, None)
        if refs:
            refs[:] = [r for r in refs if r() is not None and id(r()) not in inside]
