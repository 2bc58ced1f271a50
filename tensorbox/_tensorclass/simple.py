"""Fields annotated with a simple type (``str``, ``int``, ``float``, ``bool``, or
``Optional`` of one) refuse a value of another type, naming the field.

The usual mistake this catches is a batch size passed by position:
``Sample(images, labels, [4])`` would otherwise store ``[4]`` in the next field and
build a container without batch dims. A value is accepted when it is of the type
(an ``int`` for a ``float``), ``None`` where the annotation or the default allows it,
a tensor or numpy array (tensordict's conversions), or one value of the type per row:
a (nested) list shaped like the batch, kept one value per row.

>>> import torch
>>> from tensorbox import TensorClass
>>> class Sample(TensorClass):
...     labels: torch.Tensor
...     subset: str = "train"
>>> Sample(torch.zeros(4), [4])
Traceback (most recent call last):
  ...
TypeError: Sample.subset is annotated str, got [4] (a list); pass the batch size by keyword: batch_size=[4]
>>> Sample(torch.zeros(2), ["a", "b"], batch_size=[2])[1].subset
'b'
"""

from __future__ import annotations

import types
import typing
from typing import Any

import numpy as np
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData, per_row
from tensorbox._tensorclass.fields import Field

__all__ = ["check_simple", "simple_spec"]

_SIMPLE: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (float, int),
    bool: (bool,),
    "str": (str,),
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
}


def simple_spec(f: Field[Any]) -> tuple[tuple[type, ...], bool] | None:
    """``(accepted types, None allowed)`` for a simply annotated field, else None."""
    ann = f.type
    optional = f.default is None
    if isinstance(ann, str):
        text = ann.replace(" ", "")
        for wrap in ("Optional[", "typing.Optional["):
            if text.startswith(wrap) and text.endswith("]"):
                text, optional = text[len(wrap) : -1], True
        parts = text.split("|")
        if "None" in parts:
            parts.remove("None")
            optional = True
        if len(parts) != 1 or parts[0] not in _SIMPLE:
            return None
        return _SIMPLE[parts[0]], optional
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(ann)) != 2:
            return None
        ann, optional = args[0], True
    try:
        accepted = _SIMPLE.get(ann)
    except TypeError:  # an unhashable annotation
        return None
    return None if accepted is None else (accepted, optional)


def check_simple(
    cls: type, name: str, value: Any, spec: tuple[tuple[type, ...], bool], batch: Any
) -> Any:
    """``value`` if it fits the field (a per-row list becomes per-row data), else TypeError."""
    accepted, optional = spec
    if value is None and optional:
        return value
    if isinstance(value, accepted) and not (bool in accepted) ^ isinstance(value, bool):
        return value
    if isinstance(value, (Tensor, np.ndarray, NonTensorData)):
        return value
    if type(value) is list and batch and _per_row_fits(value, accepted, tuple(batch)):
        arr = np.empty(tuple(batch), dtype=object)
        _fill(arr, value)
        return per_row(arr)
    kind = " | ".join(t.__name__ for t in accepted[:1]) + (" | None" if optional else "")
    hint = ""
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        hint = f"; pass the batch size by keyword: batch_size={list(value)}"
    elif type(value) is list:
        hint = f"; a list must hold one {accepted[0].__name__} per row of batch_size {list(batch)}"
    raise TypeError(
        f"{cls.__name__}.{name} is annotated {kind}, got {_short(value)} "
        f"(a {type(value).__name__}){hint}"
    )


def _per_row_fits(value: Any, accepted: tuple[type, ...], shape: tuple[int, ...]) -> bool:
    if not shape:
        return isinstance(value, accepted) and not isinstance(value, list)
    return (
        type(value) is list
        and len(value) == shape[0]
        and all(_per_row_fits(v, accepted, shape[1:]) for v in value)
    )


def _fill(arr: np.ndarray, value: list[Any]) -> None:
    for i, v in enumerate(value):
        if arr.ndim > 1:
            _fill(arr[i], v)
        else:
            arr[i] = v


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."
