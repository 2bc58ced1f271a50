"""``LinkedList``: what ``td[key]`` gives for a value per row, as tensordict's.

A list of the rows' values whose item assignments are written back to the container
(``td["names"][0] = "z"`` changes the entry, as it does in tensordict), through the
container's own row writes (``set_at_``), so a saved tree commits them as any other
write. Methods that change the length (``append``, ``extend``, ``insert``, ``pop``,
``remove``, ``clear``, ``del``, ``+=``, ``*=``...) change the list only and unlink it;
a write the container refuses leaves the list unchanged.

>>> from tensorbox import NonTensorStack, TensorDict
>>> td = TensorDict(tags=NonTensorStack("a", "b", "c"), batch_size=[3])
>>> tags = td["tags"]
>>> tags[0] = "z"
>>> td["tags"], tags
(LinkedList(['z', 'b', 'c']), LinkedList(['z', 'b', 'c']))
>>> tags.append("d")  # a new length: the list only, unlinked
>>> td["tags"].tolist()
['z', 'b', 'c']
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any, SupportsIndex

import numpy as np

__all__ = ["LinkedList", "linked"]


def _unlinked() -> None:
    return None


class LinkedList(list):  # type: ignore[type-arg]  # holds whatever the rows hold
    """A list of the values of a non-tensor entry, one per row, whose item assignments
    are written to the container it was read from (``td[key]``). ``LinkedList(iterable)``
    builds a list linked to nothing; ``tolist()`` gives plain nested lists."""

    _owner: Callable[[], Any]
    _wrap: Callable[..., Any]  # NonTensorData (passed in: nontensor imports this module)
    _key: tuple[str, ...]
    _prefix: tuple[int, ...]
    _shape: tuple[int, ...]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._owner = _unlinked
        self._key, self._prefix, self._shape = (), (), ()

    def __setitem__(self, index: Any, value: Any) -> None:
        owner = self._owner()
        if owner is None:
            super().__setitem__(index, value)
            return
        n = len(self)
        old = list(self)
        super().__setitem__(index, value)
        try:
            if len(self) != n:
                raise ValueError(
                    f"LinkedList: this assignment changes the length ({n} to {len(self)}), "
                    f"which batch dim {len(self._prefix)} of entry {'.'.join(self._key)!r} "
                    "cannot follow; write one value per row (or tolist() for a free copy)"
                )
            self._write(owner, index)
        except BaseException:
            super().__setitem__(slice(None), old)
            raise

    def _write(self, owner: Any, index: Any) -> None:
        wrap = self._wrap
        sub = self._shape[len(self._prefix) + 1 :]
        if isinstance(index, slice):
            rows = list(range(len(self)))[index]
            if not rows:
                return
            arr = np.empty((len(rows), *sub), dtype=object)
            for j, i in enumerate(rows):
                arr[j] = _rows(list.__getitem__(self, i), sub, self._key)
            value = wrap(arr, stacked=True)
            at: Any = (*self._prefix, rows)
        else:
            i = range(len(self))[index]  # a bad index has raised in list.__setitem__
            item = list.__getitem__(self, i)
            value = wrap(_rows(item, sub, self._key), stacked=True) if sub else wrap(item)
            at = (*self._prefix, i)
        owner.set_at_(self._key, value, at)

    def tolist(self) -> list[Any]:
        """A plain list copy, not linked (nested ``LinkedList`` items become lists)."""
        return [x.tolist() if isinstance(x, LinkedList) else x for x in self]

    def _unlink(self) -> None:
        self._owner = _unlinked
        for x in self:
            if isinstance(x, LinkedList):
                x._unlink()

    def append(self, item: Any) -> None:
        """Append ``item`` to the list only, unlinking it from the container."""
        self._unlink()
        super().append(item)

    def extend(self, items: Iterable[Any]) -> None:
        """Extend the list only, unlinking it from the container."""
        self._unlink()
        super().extend(items)

    def insert(self, index: SupportsIndex, item: Any) -> None:
        """Insert into the list only, unlinking it from the container."""
        self._unlink()
        super().insert(index, item)

    def pop(self, index: SupportsIndex = -1) -> Any:
        """Remove an item from the list only, unlinking it from the container."""
        self._unlink()
        return super().pop(index)

    def remove(self, item: Any) -> None:
        """Remove ``item`` from the list only, unlinking it from the container."""
        self._unlink()
        super().remove(item)

    def clear(self) -> None:
        """Empty the list only, unlinking it from the container."""
        self._unlink()
        super().clear()

    def __delitem__(self, index: Any) -> None:
        self._unlink()
        super().__delitem__(index)

    def __iadd__(self, items: Iterable[Any]) -> LinkedList:  # type: ignore[misc]
        self._unlink()
        return super().__iadd__(items)

    def __imul__(self, n: SupportsIndex) -> LinkedList:
        self._unlink()
        return super().__imul__(n)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LinkedList, (self.tolist(),))  # a copy or a pickle is not linked

    def __repr__(self) -> str:
        return f"LinkedList({list.__repr__(self)})"

    __str__ = __repr__


def _rows(item: Any, shape: tuple[int, ...], key: tuple[str, ...]) -> Any:
    """``item`` (nested lists) as an object array of ``shape``; ``item`` itself for ()."""
    if not shape:
        return item
    arr = np.empty(shape, dtype=object)
    for pos in np.ndindex(*shape):
        v = item
        for d, i in enumerate(pos):
            if not isinstance(v, list) or len(v) != shape[d]:
                raise ValueError(
                    f"LinkedList: entry {'.'.join(key)!r} holds {list(shape)} values per item "
                    f"here; got {item!r}"
                )
            v = v[i]
        arr[pos] = v
    return arr


def linked(
    values: np.ndarray, owner: Any, key: tuple[str, ...], wrap: Callable[..., Any]
) -> LinkedList:
    """The values of a stacked entry ``key`` of ``owner`` as nested ``LinkedList`` s;
    ``wrap`` (``NonTensorData``) holds the values a write sends to ``owner.set_at_``."""
    ref = weakref.ref(owner)
    shape = tuple(values.shape)

    def build(arr: Any, prefix: tuple[int, ...]) -> LinkedList:
        out = LinkedList(
            build(arr[i], (*prefix, i)) if arr.ndim > 1 else arr[i] for i in range(len(arr))
        )
        out._owner, out._wrap, out._key, out._prefix, out._shape = ref, wrap, key, prefix, shape
        return out

    return build(values, ())
