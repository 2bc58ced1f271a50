"""The one repr of every container: one line when it fits, else one key per line.

A tensor shows its dtype and feature dims (the dims after the batch dims): the
batch size is said once per level. A nested TensorDict shows the batch dims it
adds in front (``[4]{...}``); a nested tensorclass shows itself as at the top.
A level that fits in :data:`WIDTH` columns at its indentation stays on one line;
a larger one puts each key on its own line, indented by four spaces per level,
so the weights of a whole transformer read as a tree.

>>> import torch
>>> from tensorbox import TensorDict
>>> TensorDict({"obs": torch.zeros(4, 3), "n": {"r": torch.zeros(4, 2)}}, batch_size=[4])
TensorDict(batch_size=[4], device=None, fields={obs: float32[3], n: {r: float32[2]}})
>>> big = TensorDict({f"layer{i}": {"weight": torch.zeros(64, 64)} for i in range(2)})
>>> print(format_repr(big, width=40))
TensorDict(batch_size=[], device=None, fields={
    layer0: {weight: float32[64, 64]},
    layer1: {weight: float32[64, 64]}})
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from tensorbox._core.nontensor import NonTensorData

__all__ = ["WIDTH", "format_repr"]

#: Columns a level may take on one line before its keys go one per line.
WIDTH = 120
#: Longest repr of a non-tensor value before it is cut with "...".
_VALUE_CHARS = 60

_NTD = NonTensorData


def format_repr(x: Any, width: int = WIDTH) -> str:
    """The repr of container ``x`` (``TensorDict`` or tensorclass instance)."""
    return _render(x, None, "", width)


def _leaf(v: Any, bd: int) -> str:
    if isinstance(v, Tensor):
        return f"{str(v.dtype).removeprefix('torch.')}{list(v.shape[bd:])}"
    r = repr(v.value)
    return r if len(r) <= _VALUE_CHARS else r[: _VALUE_CHARS - 3] + "..."


def _entries(x: Any) -> list[tuple[str, Any]]:
    """What a level shows: a tensorclass its ``repr=True`` fields in field order,
    a TensorDict every key in insertion order."""
    store = x._tensordict
    fields = getattr(type(x), "__tc_fields__", None)
    if fields is None:
        return list(store.items())
    return [(f.name, store[f.name]) for f in fields if f.repr and f.name in store]


def _tail(x: Any) -> str:
    out = f"batch_size={list(x._batch_size)}, device={x._device}"
    return out + ", locked=True" if x._locked else out


def _one(x: Any, parent_bd: int | None) -> str:
    """``x`` on one line, whatever its length."""
    bd = len(x._batch_size)
    shown = (
        f"{k}{'=' if hasattr(type(x), '__tc_fields__') else ': '}"
        + (_leaf(v, bd) if isinstance(v, Tensor) or type(v) is _NTD else _one(v, bd))
        for k, v in _entries(x)
    )
    body = ", ".join(shown)
    if hasattr(type(x), "__tc_fields__"):
        name = type(x).__name__
        return f"{name}({body}, {_tail(x)})" if body else f"{name}({_tail(x)})"
    if parent_bd is None:
        return f"{type(x).__name__}({_tail(x)}, fields={{{body}}})"
    extra = list(x._batch_size[parent_bd:])
    return f"{extra if extra else ''}{{{body}}}"


def _render(x: Any, parent_bd: int | None, indent: str, width: int) -> str:
    line = _one(x, parent_bd)
    if len(indent) + len(line) <= width:
        return line
    bd = len(x._batch_size)
    is_tc = hasattr(type(x), "__tc_fields__")
    sep = "=" if is_tc else ": "
    inner = indent + "    "
    lines = [
        f"{inner}{k}{sep}"
        + (
            _leaf(v, bd)
            if isinstance(v, Tensor) or type(v) is _NTD
            else _render(v, bd, inner, width)
        )
        for k, v in _entries(x)
    ]
    if is_tc:
        return f"{type(x).__name__}(\n" + ",\n".join([*lines, inner + _tail(x)]) + ")"
    if parent_bd is None:
        return f"{type(x).__name__}({_tail(x)}, fields={{\n" + ",\n".join(lines) + "})"
    extra = list(x._batch_size[parent_bd:])
    return f"{extra if extra else ''}{{\n" + ",\n".join(lines) + "}"
