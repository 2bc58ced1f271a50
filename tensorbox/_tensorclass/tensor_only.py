"""``tensor_only=True``: a tensorclass whose fields all hold tensors or containers.

tensordict's option of the same name. Every field must be annotated with a tensor type
(``Tensor`` or a subclass, torch's ``IntTensor``...), a container (``TensorDict``, a
tensorclass), ``NonTensorData``, or an optional / union of those; anything else is a
``TypeError`` when the class is created. A value given to a tensor-annotated field is
converted with ``torch.as_tensor`` (numbers, lists, numpy arrays), so reading the field
always gives a tensor; a mapping given to a container field becomes a ``TensorDict``
(as it does in every tensorclass).

>>> import torch
>>> from tensorbox import TensorClass
>>> class Point(TensorClass["tensor_only"]):
...     x: torch.Tensor
...     y: torch.Tensor | None = None
>>> p = Point(1, 2.5)
>>> p.x, p.y
(tensor(1), tensor(2.5000))
>>> class Bad(TensorClass["tensor_only"]):
...     x: torch.Tensor
...     name: str
Traceback (most recent call last):
  ...
TypeError: Bad.name: a tensor_only tensorclass takes fields annotated with a tensor type, a TensorDict, a tensorclass, NonTensorData or None (or a union of them); got 'str'
"""

from __future__ import annotations

import re
import sys
import types
import typing
from typing import Any

import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData
from tensorbox._tensorclass.fields import Field

__all__ = ["tensor_fields", "wrapper_fields"]

# The names an annotation may use when it cannot be evaluated (a class local to a function).
_TENSOR_NAMES = re.compile(r"^(torch\.)?\w*Tensor$")
_OTHER_NAMES = frozenset({"TensorDict", "TensorDictBase", "NonTensorData", "None", "NoneType"})
_TYPING_NAMES = frozenset(
    {"Any", "Dict", "List", "Tuple", "Set", "Mapping", "Sequence", "Callable"}
)
# ``Name[...]`` for a name other than Optional/Union, innermost first
_GENERIC_ARGS = re.compile(r"((?<![\w.])(?!Optional\[|Union\[|typing\.)[\w.]+)\[[^\[\]]*\]")


def tensor_fields(cls: type, flds: tuple[Field[Any], ...]) -> frozenset[str]:
    """The fields of tensor_only class ``cls`` whose values become tensors; refuses the
    annotations a tensor_only class cannot hold."""
    out = set()
    for f in flds:
        kinds = _kinds(cls, f.type)
        if kinds is None:
            raise TypeError(
                f"{cls.__name__}.{f.name}: a tensor_only tensorclass takes fields annotated "
                "with a tensor type, a TensorDict, a tensorclass, NonTensorData or None (or a "
                f"union of them); got {_show(f.type)!r}"
            )
        if "tensor" in kinds:
            out.add(f.name)
    return frozenset(out)


def wrapper_fields(cls: type, flds: tuple[Field[Any], ...]) -> frozenset[str]:
    """The fields of tensor_only class ``cls`` annotated ``NonTensorData`` (or optional):
    reading one gives the ``NonTensorData`` holding the value, as in tensordict."""
    out = set()
    for f in flds:
        ann = f.type
        if isinstance(ann, str):
            named = {p for p in re.split(r"[|\[\],\s]", ann) if p}
            named -= {"Optional", "Union", "typing.Optional", "typing.Union", "None"}
            if named == {"NonTensorData"}:
                out.add(f.name)
            continue
        args = (
            typing.get_args(ann)
            if typing.get_origin(ann) in (typing.Union, types.UnionType)
            else (ann,)
        )
        if [a for a in args if a is not type(None)] == [NonTensorData]:
            out.add(f.name)
    return frozenset(out)


def _show(ann: Any) -> str:
    return ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann))


def _kinds(cls: type, ann: Any) -> set[str] | None:
    """``{"tensor", "container", "none"}`` that ``ann`` allows, or None if it allows more."""
    if isinstance(ann, str):
        module = sys.modules.get(cls.__module__)
        scope = dict(vars(module)) if module is not None else {}
        scope.setdefault(cls.__name__, cls)
        try:
            ann = eval(ann, scope)  # the class's own annotation, as typing.get_type_hints does
        except Exception:  # a name local to a function, or a subscript torch refuses
            return _text_kinds(ann)
    return _value_kinds(ann)


def _value_kinds(ann: Any) -> set[str] | None:
    if ann is None or ann is type(None):
        return {"none"}
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        out: set[str] = set()
        for arg in typing.get_args(ann):
            part = _value_kinds(arg)
            if part is None:
                return None
            out |= part
        return out
    if origin is not None:  # a parameterized generic: TensorDict[str, Tensor]
        ann = origin
    if not isinstance(ann, type):
        return None
    if issubclass(ann, Tensor) or type(ann).__name__ == "tensortype":  # torch.IntTensor
        return {"tensor"}
    if getattr(ann, "_is_tensor_collection", False) or issubclass(ann, NonTensorData):
        return {"container"}
    return None


def _text_kinds(text: str) -> set[str] | None:
    text = text.replace(" ", "")
    while True:  # a generic's arguments do not matter: TensorDict[str, Tensor] is a TensorDict
        plain = _GENERIC_ARGS.sub(lambda m: m.group(1), text)
        if plain == text:
            break
        text = plain
    out: set[str] = set()
    for part in filter(None, re.split(r"[|\[\],]", text)):
        if part in ("Optional", "Union", "typing.Optional", "typing.Union"):
            continue
        if part in _OTHER_NAMES:
            out.add("none" if part.startswith("None") else "container")
        elif _TENSOR_NAMES.match(part):
            out.add("tensor")
        elif part[:1].isupper() and part.rsplit(".", 1)[-1] not in _TYPING_NAMES:
            out.add("container")  # a class we cannot see (a local tensorclass): accepted
        else:
            return None
    return out


def as_tensor(value: Any) -> Any:
    """A value for a tensor field of a tensor_only class: a tensor where torch makes one."""
    if value is None or isinstance(value, (Tensor, NonTensorData)):
        return value
    if getattr(type(value), "_is_tensor_collection", False):
        return value
    return torch.as_tensor(value)
