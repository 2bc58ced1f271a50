"""Keys a row write creates: ``td[rows] = other`` where ``other`` holds keys ``td`` has
not set (or a tensorclass field still None), as in tensordict.

Each missing entry is made for the whole batch first, zeros in the rows not written
(``None`` for a non-tensor value, an empty container of the same type for a nested
one, filled by the row write below it), through the container's own gate: a locked
container raises ``LockedError``, a tensorclass takes declared fields only, and on a
saved tree the new key is committed with the rows. Every missing key is created
before any row is written, so a refused key leaves every row as it was.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.zeros(4), batch_size=[4])
>>> td[1:3] = TensorDict(a=torch.ones(2), b=torch.full((2, 2), 7), batch_size=[2])
>>> td["b"][:, 0].tolist()
[0, 7, 7, 0]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.jagged import NJT
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import cpu_index, per_row
from tensorbox._core.tree import is_coll, new_plain
from tensorbox.errors import TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = ["create_missing"]


def create_missing(td: TensorCollection, store: Mapping[str, Any], index: Any) -> None:
    """Create in ``td`` every key of ``store`` it lacks, shaped for ``td[index] = store``."""
    missing = [k for k in store if td._tensordict.get(k) is None]
    if not missing:
        return
    bs = td._batch_size
    picked = torch.empty(()).expand(bs)[cpu_index(index)].shape  # the written rows' shape
    for k in missing:
        td._set_str(k, _blank(td, k, store[k], len(picked)), (k,))


def _blank(td: TensorCollection, key: str, value: Any, picked: int) -> Any:
    """The whole-batch entry for ``key`` that a row write of ``value`` then fills."""
    bs, dev = td._batch_size, td._device
    if type(value) is NJT:
        raise TensorDictKeyError(
            f"cannot create jagged key {format_key((key,))} by a row write: its rows' "
            "lengths are unknown until every row is set; set the whole key first"
        )
    if isinstance(value, np.ndarray) and value.dtype != object:
        value = torch.from_numpy(value)
    if isinstance(value, Tensor):
        feat = value.shape[picked:] if value.ndim >= picked else torch.Size()
        where = dev if dev is not None else value.device
        return torch.zeros((*bs, *feat), dtype=value.dtype, device=where)
    if is_coll(value):
        extra = value.batch_size[picked:] if len(value.batch_size) >= picked else ()
        return type(value)._new_unsafe({}, torch.Size((*bs, *extra)), dev)
    if isinstance(value, Mapping):
        return new_plain({}, bs, dev)
    return per_row(np.full(tuple(bs), None, dtype=object))  # a value per row, None unset
