"""Pickling a container: its entries, batch size, device and lock, rebuilt without checks.

A tensor that is a view of a mapped file pickles as a reference to that file
(see ``_storage.fileref.shareable``, reached through the core's ``file_refs`` port,
``_core/ports.py``), so DataLoader workers and producer processes
reach the same bytes instead of copying them. A tensorclass pickles the same way
and is rebuilt by its class (importable by pickle, as for any object), through the
one rule of ``tree.rebuild`` (the entries checked against the class's fields), without
running ``__post_init__``.

``torch.save`` is the exception: a file meant to travel must hold bytes, never
paths, so while ``torch.save`` pickles (:func:`in_torch_save`), memory-mapped
leaves are embedded. What such a file names (``_rebuild``, the container classes,
``NonTensorData``) is registered with ``torch.serialization.add_safe_globals``, so
``torch.load`` with its default ``weights_only=True`` loads it, and none of those
globals can open a file.

>>> import pickle, torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.arange(3), batch_size=[3]).lock_()
>>> back = pickle.loads(pickle.dumps(td))
>>> back["a"].tolist(), back.is_locked
([0, 1, 2], True)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from tensorbox._core import ports as _ports
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll, rebuild, type_name

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = ["in_torch_save", "reduce", "safe_globals"]


def in_torch_save() -> bool:
    """True while ``torch.save`` pickles (its frame is on the stack): embed, never refer."""
    frame = sys._getframe(1)
    code = torch.serialization._save.__code__
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def safe_globals(*classes: type) -> None:
    """Let ``torch.load(weights_only=True)`` rebuild containers of ``classes``."""
    from tensorbox._core.consolidate import _rebuild_packed

    torch.serialization.add_safe_globals([_rebuild, _rebuild_packed, NonTensorData, *classes])


def reduce(td: TensorCollection) -> tuple[Any, ...]:
    """``__reduce__`` of every container."""
    if in_torch_save():
        entries = dict(td._tensordict)  # tensors embedded by torch.save's own pickler
    else:
        shareable = _ports.file_refs().shareable  # the file layer loads on first pickle
        entries = {
            k: (shareable(v) if isinstance(v, Tensor) else v) for k, v in td._tensordict.items()
        }
    return (_rebuild, (type(td), entries, tuple(td._batch_size), td._device, td._locked))


def _rebuild(
    cls: type, entries: dict[str, Any], bs: tuple[int, ...], device: Any, locked: bool
) -> Any:
    restore = _ports.file_refs().restore
    store = {
        k: (v if isinstance(v, Tensor | NonTensorData) or is_coll(v) else restore(v))
        for k, v in entries.items()
    }
    # The one rule of what a node becomes (``tree.rebuild``), with the pickled class asked
    # for by name: a tensorclass checks the entries against its fields.
    td = rebuild(type_name(cls), store, torch.Size(bs), device, requested=cls)
    td._locked = locked
    return td
