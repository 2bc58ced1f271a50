"""Pickling a container: its entries, batch size, device and lock, rebuilt without checks.

A tensor that is a view of a mapped file pickles as a reference to that file
(see ``_memmap_tensor.shareable``), so DataLoader workers and producer processes
reach the same bytes instead of copying them. A tensorclass pickles the same way
and is rebuilt by its class (importable by pickle, as for any object), without
running ``__post_init__``.

>>> import pickle, torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.arange(3), batch_size=[3]).lock_()
>>> back = pickle.loads(pickle.dumps(td))
>>> back["a"].tolist(), back.is_locked
([0, 1, 2], True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ._nontensor import NonTensorData
from ._tree import is_coll

if TYPE_CHECKING:
    from ._container import TensorCollection

__all__ = ["reduce"]


def reduce(td: TensorCollection) -> tuple[Any, ...]:
    """``__reduce__`` of every container."""
    from ._memmap_tensor import shareable  # the file layer loads on first pickle

    entries = {k: (shareable(v) if isinstance(v, Tensor) else v) for k, v in td._tensordict.items()}
    return (_rebuild, (type(td), entries, tuple(td._batch_size), td._device, td._locked))


def _rebuild(
    cls: type, entries: dict[str, Any], bs: tuple[int, ...], device: Any, locked: bool
) -> Any:
    from ._memmap_tensor import restore

    store = {
        k: (v if isinstance(v, Tensor | NonTensorData) or is_coll(v) else restore(v))
        for k, v in entries.items()
    }
    td = cls._new_unsafe(store, torch.Size(bs), device)  # type: ignore[attr-defined]
    td._locked = locked
    return td
