"""``TensorCollection``: the one base of ``TensorDict`` and every tensorclass.

This class holds the contract and the gates; every other container method is written
once, typed to return ``Self``, in the mixin of its job (``tensorbox._core.methods``):

- ``EntryMethods`` (``methods/entries.py``): entries by key: get, set, update, pop,
  set_at_, update_at_, get_at, non-tensor entries...
- ``StructureMethods`` (``methods/structure.py``): the key structure: select, exclude,
  rename_key_, flatten_keys, split_keys, replace...
- ``LeafMethods`` (``methods/leaves.py``): every leaf: apply, to, clone, casts, detach...
- ``ShapeMethods`` (``methods/shape.py``): the batch shape: reshape, permute, expand,
  flip, split, unbind, tile...
- ``MathMethods`` (``methods/math.py``): operators, elementwise math, reductions.
- ``PersistenceMethods`` (``methods/persistence.py``), ``ConvertMethods``
  (``methods/convert.py``), ``WeightsMethods`` (``methods/weights.py``),
  ``DistributedMethods`` (``methods/distributed.py``): saved trees, other formats, module
  weights, ``torch.distributed``; each reaches the layer above the core that does the
  work through a port (``_core/ports.py``), never by import.

Each is a short call into the operation module that owns the job (``index``,
``apply``, ``keyops``, ``shapeops``, ``elementwise``, ``repr``, ``pickling``), which works
over the private contract (see ``_core.tree``): four slots (``_tensordict``, the dict
of entries; ``_batch_size``; ``_device``; ``_locked``) and ``_new_unsafe(storage,
batch_size, device)``, which builds one of the caller's type without checks.
``TensorDict`` adds its constructor and the key hot path; ``TensorClass`` adds fields,
``__setattr__`` and the dataclass machinery, and gates new keys through ``_set_str``.

>>> import torch
>>> from tensorbox import TensorDict, TensorClass
>>> class Pair(TensorClass):
...     a: torch.Tensor
...     b: torch.Tensor
>>> p = Pair(torch.zeros(4, 2), torch.ones(4), batch_size=[4])
>>> type(p.reshape(2, 2)).__name__, type(p.to_tensordict().reshape(2, 2)).__name__
('Pair', 'TensorDict')
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import EllipsisType
from typing import Any, Self, overload

import torch
from torch import Tensor

from tensorbox._core import index as _index
from tensorbox._core import lockgraph
from tensorbox._core import ports as _ports
from tensorbox._core import repr as _repr
from tensorbox._core import tree as _tree
from tensorbox._core.backing import OPEN as _OPEN
from tensorbox._core.backing import TREES as _TREES
from tensorbox._core.backing import UNLOCK as _UNLOCK
from tensorbox._core.backing import sync_open
from tensorbox._core.batchshape import BatchShaped
from tensorbox._core.entries import prepare_entry
from tensorbox._core.methods.compat import CompatMethods
from tensorbox._core.methods.convert import ConvertMethods
from tensorbox._core.methods.distributed import DistributedMethods
from tensorbox._core.methods.entries import EntryMethods, is_key, put
from tensorbox._core.methods.leaves import LeafMethods
from tensorbox._core.methods.math import MathMethods
from tensorbox._core.methods.persistence import PersistenceMethods
from tensorbox._core.methods.shape import ShapeMethods
from tensorbox._core.methods.structure import StructureMethods
from tensorbox._core.methods.weights import WeightsMethods
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.nontensor import read as _read
from tensorbox._core.shape import as_batch_size, check_leaf_shape
from tensorbox._core.tree import missing_key_error, set_locked
from tensorbox.errors import LockedError

__all__ = ["TensorCollection"]

#: A batch index (anything but a key): gives a container of the same type.
BatchIndex = int | slice | Tensor | Sequence[Any] | EllipsisType | None | tuple[Any, ...]

_NTD = NonTensorData
_new = object.__new__


class TensorCollection(
    BatchShaped,  # shape, batch_dims, ndim, dim(), numel(): from the batch size
    EntryMethods,
    StructureMethods,
    LeafMethods,
    ShapeMethods,
    MathMethods,
    PersistenceMethods,
    ConvertMethods,
    WeightsMethods,
    DistributedMethods,
    CompatMethods,
):
    """The container behaviour shared by ``TensorDict`` and tensorclasses (not built directly)."""

    __slots__ = (
        "__weakref__",
        "_batch_size",
        "_device",
        "_lock_parents_weakrefs",
        "_lock_stack",
        "_locked",
        "_packed",
        "_prev_lock",
        "_tensordict",
        "_writeback",
    )
    _is_tensor_collection = True

    _tensordict: dict[str, Any]
    _batch_size: torch.Size
    _device: torch.device | None
    _locked: bool
    _prev_lock: bool
    _lock_stack: list[tuple[bool, bool]]
    #: (storage, layout) of a consolidated container (see _core/consolidate.py), or None
    _packed: tuple[Tensor, dict[str, Any]] | None
    #: (source, method, args): how a view's in-place changes write back to its source
    _writeback: tuple[Any, str, tuple[Any, ...]]

    @classmethod
    def _new_unsafe(
        cls, source: dict[str, Any], batch_size: torch.Size, device: torch.device | None
    ) -> Self:
        """Build one of this type around ``source`` without any check (the contract)."""
        self = _new(cls)
        self._tensordict = source
        self._batch_size = batch_size
        self._device = device
        self._locked = False
        return self

    def _set_str(self, key: str, value: Any, path: tuple[str, ...]) -> None:
        """The one gate through which a key is added or replaced at this level."""
        if self._locked:
            raise LockedError(
                f"cannot set {format_key(path)}: the {type(self).__name__} is locked{_UNLOCK}, "
                "or write in place with set_ / td[idx] = ..."
            )
        if _OPEN and id(self) in _OPEN:  # an unlocked node of a saved tree: committed at once
            self._through(put, self, key, value, path)
            return
        self._tensordict[key] = prepare_entry(self, key, value, path)

    # ------------------------------------------------------- batch size, device

    @property
    def batch_size(self) -> torch.Size:
        """The leading dims shared by every leaf.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2, 3), batch_size=[2, 3])
        >>> td.batch_size = [2]        # fewer batch dims: the leaves' shapes allow it
        >>> td.batch_size, td["x"].shape
        (torch.Size([2]), torch.Size([2, 3]))
        """
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Sequence[int] | int) -> None:
        new = as_batch_size(value)
        for path, leaf in _tree.iter_shaped(self):
            if leaf.is_nested:
                from tensorbox._core.jagged import check_leaf

                check_leaf(leaf, path, new)
            else:
                check_leaf_shape(format_key(path), leaf.shape, new)
        self._write(_tree.set_batch_size_nested, self, new)  # saved at once on a saved tree

    @overload
    def size(self, dim: None = None) -> torch.Size: ...

    @overload
    def size(self, dim: int) -> int: ...

    def size(self, dim: int | None = None) -> torch.Size | int:
        """The batch size, or its ``dim``-th entry."""
        return self._batch_size if dim is None else self._batch_size[dim]

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    @property
    def device(self) -> torch.device | None:
        """The device every leaf lives on, or None when not fixed (read-only, as in
        tensordict: moving leaves is a copy, ``to(device)``)."""
        return self._device

    @device.setter
    def device(self, value: Any) -> None:
        raise RuntimeError(
            f"device cannot be set with {type(self).__name__}.device = {value!r}: moving the "
            "leaves is a copy; use .to(device) for a moved copy, or clear_device_()"
        )

    # ------------------------------------------------------------------ locking

    @property
    def is_locked(self) -> bool:
        """True when entries may not be added, removed or replaced."""
        return self._locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        self._set_lock(bool(value))

    def lock_(self) -> Self:
        """Forbid adding, removing or replacing entries (in-place writes stay allowed).

        Also a context manager that restores the previous state on exit:

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(1))
        >>> with td.lock_():
        ...     td.is_locked
        True
        >>> td.is_locked
        False
        """
        self._prev_lock = self._locked
        self._set_lock(True)
        return self

    def unlock_(self) -> Self:
        """Allow adding, removing and replacing entries again (a context manager too:
        ``with td.unlock_(): td["new"] = x`` locks again on exit).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), batch_size=[2]).lock_()
        >>> with td.unlock_():
        ...     td["y"] = torch.ones(2)
        >>> td.is_locked, sorted(td.keys())
        (True, ['x', 'y'])
        """
        self._prev_lock = self._locked
        self._set_lock(False)
        return self

    def __enter__(self) -> Self:
        stack = getattr(self, "_lock_stack", None)
        if stack is None:
            stack = self._lock_stack = []
        prev = getattr(self, "_prev_lock", None)
        if prev is None:  # no lock_()/unlock_() just before: a view used as a context
            stack.append((self._locked, False))
        else:  # `with x.unlock_():` undoes that call only (tensordict's last-op rule)
            del self._prev_lock
            stack.append((prev, True))
        return self

    def __exit__(self, *exc: object) -> None:
        stack = getattr(self, "_lock_stack", None)
        if stack:
            prev, lock_context = stack.pop()
            self._set_lock(prev)
            if lock_context:
                return
        link = getattr(self, "_writeback", None)
        if link is not None and not exc[0]:  # a view used as a context: write it back
            source, op, args = link
            source.update(getattr(self, op)(*args), inplace=True)

    # ----- the write gates (a node of a saved tree commits each write: backing port)

    def _set_lock(self, flag: bool) -> None:
        if not flag and getattr(self, "_packed", None) is not None:
            # unlocked entries may be replaced: the one storage no longer holds them all
            from tensorbox._core.consolidate import drop

            drop(self)
        if not flag:
            lockgraph.forget(self)  # refuses while a locked parent still holds the subtree
        set_locked(self, flag)
        if flag:
            lockgraph.record(self)
        if _TREES:
            sync_open(self)

    def _through(self, fn: Any, *args: Any) -> Any:
        """Run the write ``fn(*args)`` on this node of a saved tree and commit the tree
        (through the backing hook, see :mod:`tensorbox._core.backing`)."""
        return _ports.backing().through(self, fn, *args)

    def _write_rows(self, index: Any, value: Any) -> None:
        """``self[index] = value`` on a node of a saved tree (through the backing hook)."""
        _ports.backing().write_rows(self, index, value)

    def _write_many(self, value: Any, index: Any, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, a write of the entries ``value`` into the rows ``index`` (None:
        whole entries), committed at once, all or nothing, when this is a node of a saved
        tree (through the backing hook)."""
        if _TREES and id(self) in _TREES:
            return _ports.backing().guarded(self, value, index, fn, *args)
        return fn(*args)

    def _write(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, committed at once when this is a node of a saved tree."""
        if _TREES and id(self) in _TREES:
            return self._through(fn, *args)
        return fn(*args)

    # --------------------------------------------- indexing: a key or the batch

    @overload
    def __getitem__(self, index: str | tuple[str, ...]) -> Any: ...

    @overload
    def __getitem__(self, index: BatchIndex) -> Self: ...

    def __getitem__(self, index: Any) -> Any:
        """A key (str or tuple of str) gives its value; anything else indexes the batch dims."""
        if type(index) is str:
            try:
                v = self._tensordict[index]
            except KeyError:
                raise missing_key_error(self, (index,), 0) from None
            return _read(v, self._batch_size, self, index) if type(v) is _NTD else v
        if type(index) is tuple and index and type(index[0]) is str:
            v = self._get_path(index)
            if type(v) is _NTD:  # a value per row: linked to this container's rows
                return _read(v, self._batch_size, self, index) if v.stacked else v.data
            return v
        return _index.getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            if self._locked and isinstance(value, Tensor) and self._tensordict.get(index) is value:
                return  # ``td[k] += 1`` sets back the leaf it just added to in place: no change
            self._set_str(index, value, (index,))
        elif is_key(index):
            self.set(index, value)
        elif _TREES and id(self) in _TREES:  # non-tensor values reach the tree's meta.json
            self._write_rows(index, value)
        else:
            _index.setitem_batch(self, index, value)

    def __iter__(self) -> Iterator[Self]:
        """Iterate over the first batch dim, like a tensor (use ``keys()`` for keys)."""
        if not self._batch_size:
            raise TypeError(
                f"iteration over a {type(self).__name__} with batch_size [] (use keys())"
            )
        return iter(self.unbind(0))

    def __getitems__(self, indices: Sequence[int] | Tensor) -> Self:
        """Batched fetch for ``torch.utils.data.DataLoader``: one gather per leaf."""
        out: Self = _index.gather_rows(self, indices)
        return out

    # ----------------------------------------------------------- repr, pickling

    def __repr__(self) -> str:
        return _repr.format_repr(self)

    def __reduce__(self) -> tuple[Any, ...]:
        if getattr(self, "_packed", None) is not None:  # one buffer and its layout
            from tensorbox._core.consolidate import packed_reduce

            return packed_reduce(self)
        from tensorbox._core import pickling as _pickling

        return _pickling.reduce(self)
