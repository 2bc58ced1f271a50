"""``autocast=True`` and ``nocast=True``: tensordict's casting switches for tensorclasses.

By default a tensorclass stores what it is given, converting where a TensorDict would
(numpy arrays become tensors, numbers become tensors in fields annotated ``Tensor``) and
checking simple annotations (``tensorbox._tensorclass.simple``). The two switches change
that, class by class:

- ``autocast=True`` casts every value set to a field (in ``__init__`` and on assignment) to
  the field's annotation: ``Tensor`` (``torch.as_tensor``; a string is a ``TypeError``),
  ``int``/``float``/``bool``/``str`` (the builtin applied to the value), ``np.ndarray``,
  ``TensorDict`` (a mapping becomes one, with the instance's batch size) and a tensorclass
  (a mapping becomes an instance, with the instance's batch size; a string annotation
  naming the class itself works in any scope). An annotation that names no single type
  (``Any``, a union, ``Optional``) casts nothing: numbers become tensors, as in a
  TensorDict, and a mapping is kept as given.
- ``nocast=True`` stores every value as given: numbers, bools and numpy arrays stay Python
  and numpy values, whatever the annotation (which is not checked).

The class flags ``_autocast``, ``_nocast`` and ``_frozen`` (tensordict's names) say which
options a class was built with.

>>> import torch
>>> from tensorbox import TensorClass, TensorDict
>>> class Cast(TensorClass, autocast=True):
...     x: torch.Tensor
...     n: int
...     name: str
...     extra: TensorDict
>>> c = Cast(x=1, n=torch.tensor(3), name=7, extra={"a": torch.zeros(())})
>>> c.x, c.n, c.name, type(c.extra).__name__, Cast._autocast
(tensor(1), 3, '7', 'TensorDict', True)
>>> c.x = "text"
Traceback (most recent call last):
  ...
TypeError: Cast.x is annotated Tensor (autocast=True); 'text' (a str) cannot become one
>>> import numpy as np
>>> class Keep(TensorClass, nocast=True):
...     a: int
>>> type(Keep(True).a).__name__, type(Keep(np.ones(2)).a).__name__
('bool', 'ndarray')
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData
from tensorbox._tensorclass.fields import has_default

__all__ = ["CAST_NONE", "annotation_of", "autocast_value", "nocast_value", "set_casting"]

#: ``annotation_of``'s answer for an annotation that names no single type to cast to
CAST_NONE: Any = object()

_BUILTINS = {"int": int, "float": float, "bool": bool, "str": str}


def annotation_of(cls: type, ann: Any) -> Any:
    """The type ``ann`` (a field's annotation, maybe a string) casts to, else ``CAST_NONE``."""
    if isinstance(ann, str):
        text = ann.strip()
        if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
            text = text[1:-1]  # a quoted annotation under ``from __future__ import annotations``
        if text == cls.__name__ or text == cls.__qualname__:
            return cls  # the class itself, even where its name is not in the module scope
        if text in _BUILTINS:
            return _BUILTINS[text]
        module = sys.modules.get(cls.__module__)
        scope = _known_names()
        scope.update(vars(module) if module is not None else {})
        scope.setdefault(cls.__name__, cls)
        try:
            ann = eval(text, scope)  # the class's own annotation, as typing.get_type_hints does
        except Exception:  # a name local to a function: nothing to cast to
            return CAST_NONE
    if ann is Any or typing.get_origin(ann) is not None or not isinstance(ann, type):
        return CAST_NONE  # Any, a union, Optional, a parameterized generic
    return ann


def set_casting(cls: type, flds: Any, options: Mapping[str, Any]) -> None:
    """Record the class's casting options (inherited when not given) and, for autocast, the
    fields whose values go through the cast even when they are tensors."""
    autocast = options.get("autocast")
    nocast = options.get("nocast")
    if autocast is None:
        autocast = getattr(cls, "_autocast", False)
    if nocast is None:
        nocast = getattr(cls, "_nocast", False)
    cls._autocast = bool(autocast)  # type: ignore[attr-defined]
    cls._nocast = bool(nocast) and not autocast  # type: ignore[attr-defined]
    cls.__tc_casting__ = "autocast" if autocast else "nocast" if nocast else None  # type: ignore[attr-defined]
    cls.__tc_annotations__ = {f.name: f.type for f in flds}  # type: ignore[attr-defined]
    cls.__tc_autocast__ = {}  # type: ignore[attr-defined]  # resolved on first use
    put_only = set()
    if autocast:
        for f in flds:
            target = annotation_of(cls, f.type)
            if target is CAST_NONE or not issubclass(target, Tensor):
                put_only.add(f.name)
    cls.__tc_put_only__ = frozenset(put_only)  # type: ignore[attr-defined]


def _target(cls: type, name: str) -> Any:
    cache: dict[str, Any] = cls.__tc_autocast__  # type: ignore[attr-defined]
    if name in cache:
        return cache[name]
    ann = cls.__tc_annotations__[name]  # type: ignore[attr-defined]
    target = annotation_of(cls, ann)
    if target is not CAST_NONE or not isinstance(ann, str):
        cache[name] = target  # a string that names nothing yet may resolve later
    return target


def _known_names() -> dict[str, Any]:
    """Names an annotation may use without its module importing them (a doctest, a
    module written with ``from __future__ import annotations`` and ``TYPE_CHECKING``)."""
    from tensorbox._core.tensordict import TensorDict, TensorDictBase

    names = {"torch": torch, "Tensor": Tensor, "np": np, "numpy": np}
    return names | {"TensorDict": TensorDict, "TensorDictBase": TensorDictBase}


def autocast_value(cls: type, obj: Any, name: str, value: Any) -> Any:
    """``value`` cast to the annotation of field ``name`` (see the module doc)."""
    target = _target(cls, name)
    if value is None or isinstance(value, NonTensorData):
        return value
    if target is CAST_NONE:
        if isinstance(value, Mapping) and not getattr(type(value), "_is_tensor_collection", 0):
            return NonTensorData(value)  # kept as given
        if isinstance(value, (bool, int, float, np.ndarray)):
            return torch.as_tensor(value)  # as a TensorDict stores a number
        return value
    if target is np.ndarray:  # kept an array: a NonTensorData stops the tensor conversion
        return NonTensorData(np.asarray(value))
    if isinstance(value, target):
        return value
    try:
        if issubclass(target, Tensor):
            if isinstance(value, (str, bytes)):
                raise TypeError("a string")
            return torch.as_tensor(value)
        if target in (int, float, bool, str):
            return target(value)
        if getattr(target, "_is_tensor_collection", False) and isinstance(value, Mapping):
            return _collection(target, dict(value), obj)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(
            f"{cls.__name__}.{name} is annotated {target.__name__} (autocast=True); "
            f"{_short(value)} (a {type(value).__name__}) cannot become one"
        ) from err
    return value


def _collection(target: type, source: dict[str, Any], obj: Any) -> Any:
    bs, device = obj._batch_size, obj._device
    if hasattr(target, "__tc_fields__"):  # a tensorclass
        for f in target.__tc_fields__:  # as in tensordict, a field left out reads None
            if f.init and f.name not in source and not has_default(f):
                source[f.name] = None
        return target(**source, batch_size=bs, device=device)
    from tensorbox._core.tensordict import TensorDict

    return TensorDict(source, batch_size=bs, device=device)


def nocast_value(value: Any) -> Any:
    """``value`` as the entry of a ``nocast`` class: Python and numpy values stay as given."""
    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic)):
        return NonTensorData(value)
    return value


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."
