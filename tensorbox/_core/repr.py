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

:class:`set_printoptions` changes what is shown (as a context manager, a decorator, or
for the rest of the program with ``.set()``); ``compact=False`` gives tensordict's
detailed form, one ``Tensor(shape=..., dtype=...)`` per leaf:

>>> with set_printoptions(show_device=False):
...     TensorDict({"obs": torch.zeros(4, 3)}, batch_size=[4])
TensorDict(batch_size=[4], fields={obs: float32[3]})
>>> with set_printoptions(compact=False, verbose=False):
...     print(TensorDict({"obs": torch.zeros(4, 3)}, batch_size=[4]))
TensorDict(
    fields={
        obs: Tensor(shape=torch.Size([4, 3]))},
    batch_size=torch.Size([4]))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData

__all__ = ["WIDTH", "format_repr", "get_printoptions", "set_printoptions"]

#: Columns a level may take on one line before its keys go one per line.
WIDTH = 120
#: Longest repr of a non-tensor value before it is cut with "...".
_VALUE_CHARS = 60

_NTD = NonTensorData


#: The options in force (tensordict's names). ``sort_keys`` is "insertion" (tensorclass
#: fields in field order), "alphabetical", or a key function on the key names.
_OPTIONS: dict[str, Any] = {
    "show_batch_size": True,
    "show_device": True,
    "show_is_shared": True,
    "show_shape": True,
    "show_field_device": True,
    "show_dtype": True,
    "show_field_is_shared": True,
    "show_grad": False,
    "show_is_contiguous": False,
    "show_is_view": False,
    "show_storage_size": False,
    "plain": False,
    "sort_keys": "insertion",
    "compact": True,
}
# Shown by the detailed form only: asking for one of them turns ``compact`` off
# unless ``compact`` is given too (as in tensordict).
_DETAILED_ONLY = frozenset(
    {
        "show_is_shared",
        "show_shape",
        "show_field_device",
        "show_field_is_shared",
        "show_grad",
        "show_is_contiguous",
        "show_is_view",
        "show_storage_size",
        "plain",
    }
)
_QUIET = (
    "show_device",
    "show_is_shared",
    "show_field_device",
    "show_dtype",
    "show_field_is_shared",
)


class set_printoptions(contextlib.ContextDecorator):  # a class, as tensordict (and torch) spell it
    """Change what the repr of containers shows, for a block or (``.set()``) for good.

    Options (tensordict's names): ``show_batch_size``, ``show_device``, ``show_dtype``
    and ``sort_keys`` (``"insertion"``, ``"alphabetical"`` or a key function) apply to
    both forms; ``compact=False`` gives the detailed form, one ``Tensor(...)`` per leaf,
    where ``show_shape``, ``show_field_device``, ``show_is_shared``,
    ``show_field_is_shared``, ``show_grad``, ``show_is_contiguous``, ``show_is_view``,
    ``show_storage_size`` and ``plain`` (mean/std or min/max of each leaf) apply too.
    Naming one of those turns the detailed form on unless ``compact`` is given.
    ``verbose=False`` hides devices, dtypes and sharing unless named.

    >>> import torch
    >>> from tensorbox import TensorDict
    >>> td = TensorDict({"a": torch.ones(2)}, batch_size=[2])
    >>> with set_printoptions(plain=True, verbose=False):
    ...     print(td)
    TensorDict(
        fields={
            a: Tensor(shape=torch.Size([2]), mean=1, std=0)},
        batch_size=torch.Size([2]))
    >>> set_printoptions(colour=True)
    Traceback (most recent call last):
    TypeError: Unknown printoptions ['colour']; the options are ['compact', 'plain', ...]
    """

    def __init__(self, *, verbose: bool = True, **options: Any) -> None:
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            known = sorted(_OPTIONS)
            raise TypeError(f"Unknown printoptions {unknown}; the options are {known}")
        sort_keys = options.get("sort_keys", "insertion")
        if not (callable(sort_keys) or sort_keys in ("insertion", "alphabetical")):
            raise ValueError(
                f"set_printoptions: sort_keys={sort_keys!r}; expected 'insertion', "
                "'alphabetical' or a function of the key name"
            )
        if "compact" not in options and not _DETAILED_ONLY.isdisjoint(options):
            options["compact"] = False
        if not verbose:
            options = {**dict.fromkeys(_QUIET, False), **options}
        self._options = options
        self._saved: list[dict[str, Any]] = []

    def set(self) -> None:
        """Apply the options for the rest of the program (``__exit__`` undoes it)."""
        self._saved.append(dict(_OPTIONS))
        _OPTIONS.update(self._options)

    def __enter__(self) -> None:
        self.set()

    def __exit__(self, *exc: object) -> None:
        if self._saved:
            _OPTIONS.clear()
            _OPTIONS.update(self._saved.pop())


def get_printoptions() -> dict[str, Any]:
    """A copy of the options in force (see :class:`set_printoptions`).

    >>> get_printoptions()["compact"]
    True
    """
    return dict(_OPTIONS)


def format_repr(x: Any, width: int = WIDTH) -> str:
    """The repr of container ``x`` (``TensorDict`` or tensorclass instance)."""
    if not _OPTIONS["compact"]:
        return _detailed(x, "")
    return _render(x, None, "", width)


def _leaf(v: Any, bd: int) -> str:
    if isinstance(v, Tensor):
        dims = list(v.shape[bd:])
        return (
            f"{str(v.dtype).removeprefix('torch.')}{dims}" if _OPTIONS["show_dtype"] else str(dims)
        )
    r = repr(v.value)
    return r if len(r) <= _VALUE_CHARS else r[: _VALUE_CHARS - 3] + "..."


def _entries(x: Any) -> list[tuple[str, Any]]:
    """What a level shows: a tensorclass its ``repr=True`` fields in field order,
    a TensorDict every key in insertion order."""
    store = x._tensordict
    fields = getattr(type(x), "__tc_fields__", None)
    if fields is None:
        out = list(store.items())
    else:
        out = [(f.name, store[f.name]) for f in fields if f.repr and f.name in store]
    order = _OPTIONS["sort_keys"]
    if order == "alphabetical":
        out.sort(key=lambda kv: kv[0])
    elif callable(order):
        out.sort(key=lambda kv: order(kv[0]))
    return out


def _tail(x: Any) -> str:
    parts = []
    if _OPTIONS["show_batch_size"]:
        parts.append(f"batch_size={list(x._batch_size)}")
    if _OPTIONS["show_device"]:
        parts.append(f"device={x._device}")
    if x._locked:
        parts.append("locked=True")
    return ", ".join(parts)


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
        return f"{name}({', '.join(p for p in (body, _tail(x)) if p)})"
    if parent_bd is None:
        tail = _tail(x)
        return f"{type(x).__name__}({tail + ', ' if tail else ''}fields={{{body}}})"
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
    tail = _tail(x)
    if is_tc:
        return (
            f"{type(x).__name__}(\n" + ",\n".join([*lines, *([inner + tail] if tail else [])]) + ")"
        )
    if parent_bd is None:
        head = f"{tail}, " if tail else ""
        return f"{type(x).__name__}({head}fields={{\n" + ",\n".join(lines) + "})"
    extra = list(x._batch_size[parent_bd:])
    return f"{extra if extra else ''}{{\n" + ",\n".join(lines) + "}"


# ------------------------------------------------------------------ the detailed form


def _detailed(x: Any, indent: str) -> str:
    """tensordict's ``compact=False`` layout: one line per leaf, then the level's attributes."""
    inner = indent + "    "
    is_tc = hasattr(type(x), "__tc_fields__")
    sep = "=" if is_tc else ": "
    deeper = inner if is_tc else inner + "    "
    items = [f"{deeper}{k}{sep}{_detailed_value(v, deeper, x)}" for k, v in _entries(x)]
    attrs = []
    if _OPTIONS["show_batch_size"]:
        attrs.append(f"batch_size={x._batch_size}")
    if _OPTIONS["show_device"]:
        attrs.append(f"device={x._device}")
    if _OPTIONS["show_is_shared"]:
        attrs.append(f"is_shared={x.is_shared() if x._tensordict else False}")
    if is_tc:
        lines = items + [inner + a for a in attrs]
        return f"{type(x).__name__}(\n" + ",\n".join(lines) + ")"
    fields = (
        f"{inner}fields={{\n" + ",\n".join(items) + "}" if items else f"{inner}fields={{\n{inner}}}"
    )
    return f"{type(x).__name__}(\n" + ",\n".join([fields, *(inner + a for a in attrs)]) + ")"


def _detailed_value(v: Any, indent: str, parent: Any) -> str:
    if isinstance(v, Tensor):
        return _detailed_tensor(v)
    if type(v) is _NTD:  # a value is declared for the batch of the level holding it
        return f"NonTensorData(data={v.value}, batch_size={parent._batch_size}, device={parent._device})"
    return _detailed(v, indent)


#: The fields of a leaf in the detailed layout: (option that shows it, name, value).
_TENSOR_FIELDS: tuple[tuple[str, str, Callable[[Tensor], Any]], ...] = (
    ("show_shape", "shape", lambda t: t.shape),
    ("show_field_device", "device", lambda t: t.device),
    ("show_dtype", "dtype", lambda t: t.dtype),
    ("show_field_is_shared", "is_shared", lambda t: _guard(t.is_shared)),
    ("show_grad", "requires_grad", lambda t: t.requires_grad),
    ("show_is_contiguous", "is_contiguous", lambda t: _guard(t.is_contiguous)),
    ("show_is_view", "is_view", lambda t: t._base is not None),
    ("show_storage_size", "storage_size", lambda t: _guard(lambda: t.untyped_storage().nbytes())),
)


def _detailed_tensor(t: Tensor) -> str:
    parts = [f"{name}={value(t)}" for option, name, value in _TENSOR_FIELDS if _OPTIONS[option]]
    if _OPTIONS["plain"]:
        parts.extend(_stats(t))
    name = "Tensor" if type(t) is Tensor else type(t).__name__
    return f"{name}({', '.join(parts)})"


def _stats(t: Tensor) -> list[str]:
    """mean/std of a floating leaf, min/max of another; nothing for an empty or jagged one."""
    if t.is_nested or t.numel() == 0 or t.is_meta:
        return []
    with torch.no_grad():
        if t.is_floating_point() or t.is_complex():
            std = t.std().item() if t.numel() > 1 else 0.0
            return [f"mean={t.mean().item():.4g}", f"std={std:.4g}"]
        return [f"min={t.min().item()}", f"max={t.max().item()}"]


def _guard(fn: Callable[[], Any]) -> Any:
    """A tensor property that some layouts (jagged, meta) refuse: shown as '?'."""
    try:
        return fn()
    except (RuntimeError, NotImplementedError):
        return "?"
