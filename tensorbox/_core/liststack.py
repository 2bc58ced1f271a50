"""tensordict's "list to stack" switch: a list set into a container holds one value per row.

Off by default, and then nothing changes: a list of numbers becomes a tensor and any
other list is one Python value shared by every row. Switched on
(``set_list_to_stack(True)`` as a decorator, a context manager, or ``.set()``; the
environment variable ``LIST_TO_STACK`` gives the starting mode), a list is read as
rows, as tensordict 0.15 does by default:

- ``[]`` becomes an empty float tensor (shape ``(0,)``);
- a list of tensors (or of lists of them) is stacked into one tensor;
- any other list (strings, objects, lists of them) gives one value per row: its
  leading lengths must start with the batch size (else a ``BatchSizeError``, a
  ``RuntimeError``), and ``td[i]["key"]`` is the ``i``-th item. Under a container
  with no batch dims, the list stays one value.

>>> import torch
>>> from tensorbox import TensorDict, set_list_to_stack
>>> with set_list_to_stack(True):
...     td = TensorDict(name=["a", "b"], x=[torch.zeros(3), torch.ones(3)], batch_size=[2])
>>> td[1]["name"], td["x"].shape
('b', torch.Size([2, 3]))
>>> TensorDict(name=["a", "b"], batch_size=[2])[1]["name"]  # off: one shared value
['a', 'b']
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.modeswitch import ModeSwitch, env_flag
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData, per_row
from tensorbox.errors import BatchSizeError

__all__ = ["STATE", "from_list", "list_to_stack", "set_list_to_stack"]


#: ``[mode]``: read when a list is set (one list lookup).
STATE: list[bool] = [env_flag("LIST_TO_STACK")]


def list_to_stack() -> bool:
    """True while lists set into a container are read as rows (see ``set_list_to_stack``).

    >>> from tensorbox import list_to_stack
    >>> list_to_stack()
    False
    """
    return STATE[0]


class set_list_to_stack(ModeSwitch):
    """Switch tensordict's list-to-stack reading of lists on or off.

    A context manager and a decorator (the previous mode comes back on exit), or
    ``set_list_to_stack(mode).set()`` to switch for good.

    >>> from tensorbox import TensorDict, set_list_to_stack
    >>> @set_list_to_stack(True)
    ... def build():
    ...     return TensorDict(tag=["x", "y", "z"], batch_size=[3])
    >>> build()[2]["tag"]
    'z'
    """

    _state = STATE


def _stack_tensors(value: list[Any]) -> Tensor | None:
    """``value`` stacked when every item is a tensor (or a list of them), else None."""
    if all(isinstance(v, Tensor) for v in value):
        return torch.stack(value)
    if all(type(v) is list and v for v in value):
        parts = [_stack_tensors(v) for v in value]
        if all(p is not None for p in parts):
            return torch.stack(parts)  # type: ignore[arg-type]
    return None


def _lengths(value: list[Any], depth: int) -> tuple[int, ...]:
    """The leading lengths of nested lists, down to ``depth`` levels."""
    out = [len(value)]
    level = value
    while len(out) < depth and level and all(type(v) is list for v in level):
        n = len(level[0])
        if any(len(v) != n for v in level):
            break
        out.append(n)
        level = [x for v in level for x in v]
    return tuple(out)


def from_list(value: list[Any], bs: torch.Size, path: tuple[str, ...]) -> Any:
    """The entry a list becomes under the switch: a tensor, a per-row value, or (no
    batch dims) one value."""
    if not value:
        return torch.tensor([])
    try:
        stacked = _stack_tensors(value)
    except RuntimeError as e:  # tensors of different shapes
        raise BatchSizeError(
            f"key {format_key(path)}: cannot stack the list of tensors into one tensor "
            f"({e}); store them in a list wrapped in NonTensorData, or pad them first"
        ) from None
    if stacked is not None:
        return stacked
    if not bs:
        return NonTensorData(value)
    lengths = _lengths(value, len(bs))
    if lengths != tuple(bs):
        raise BatchSizeError(
            f"key {format_key(path)}: batch dimension mismatch: the list has lengths "
            f"{lengths} and the batch_size is {tuple(bs)}; under set_list_to_stack(True) a "
            "list holds one item per row (wrap it in NonTensorData to keep it as one value)"
        )
    rows = np.empty(tuple(bs), dtype=object)
    for i, item in enumerate(_leaves(value, len(bs))):
        rows.flat[i] = item
    return per_row(rows)


def _leaves(value: list[Any], depth: int) -> list[Any]:
    level = value
    for _ in range(depth - 1):
        level = [x for v in level for x in v]
    return level
