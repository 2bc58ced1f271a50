"""``@tensorclass``: typed dataclasses that behave like a TensorDict.

Annotate fields as in a dataclass; the class gets a generated ``__init__``
(the fields, then keyword-only ``batch_size`` and ``device``), one property
per field, and every container operation (indexing, ``apply``, ``to``, shape
ops, ``torch.stack``/``torch.cat``, ``==``, memory-mapping, pickling), each
returning the user's class. Fields hold tensors, nested tensorclasses or
TensorDicts, and plain values (str, numbers, lists, dicts) kept as
``NonTensorData`` beside the tensors.

>>> import torch
>>> from tensorbox import tensorclass, TensorClass, field
>>> @tensorclass
... class Batch:
...     images: torch.Tensor
...     labels: torch.Tensor
...     stage: str = "train"
...
...     def __post_init__(self):
...         assert self.images.dtype == torch.uint8
>>> b = Batch(torch.zeros(8, 3, 4, 4, dtype=torch.uint8), torch.arange(8), batch_size=[8])
>>> b[2:4]
Batch(images=uint8[3, 4, 4], labels=int64[], stage='train', batch_size=[2], device=None)
>>> torch.stack([b[0], b[1]]).labels.tolist()
[0, 1]

The base-class form is the same class machinery and what type checkers read
best (the decorator form cannot tell them about ``batch_size`` or the methods):

>>> class Pair(TensorClass, frozen=True):
...     a: torch.Tensor
...     b: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
>>> Pair(torch.ones(2), torch.ones(2), batch_size=[2]).apply(lambda t: t * 2).a.tolist()
[2.0, 2.0]

``__post_init__`` runs when user code constructs an instance (``__init__``,
``from_tensordict``, ``replace``), never when the library rebuilds one
(indexing, ``apply``, ``stack``, unpickling, loading).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

from tensorbox._tensorclass.base import TensorClass
from tensorbox._tensorclass.build import build_class, class_options, register
from tensorbox._tensorclass.fields import Field, field

__all__ = ["is_tensorclass", "tensorclass"]

_C = TypeVar("_C", bound=type)

# The base too is a pytree node and passes through DataLoader collate.
register(TensorClass, in_registry=False)


def is_tensorclass(obj: Any) -> bool:
    """True for a tensorclass (made by ``@tensorclass`` or ``TensorClass``) or an instance.

    >>> import torch; from tensorbox import TensorClass, TensorDict, is_tensorclass
    >>> class Pair(TensorClass):
    ...     a: torch.Tensor
    >>> is_tensorclass(Pair), is_tensorclass(TensorDict), is_tensorclass(TensorClass)
    (True, False, False)
    """
    cls = obj if isinstance(obj, type) else type(obj)
    return issubclass(cls, TensorClass) and cls is not TensorClass


@overload
def tensorclass(cls: _C, /) -> _C: ...
@overload
def tensorclass(
    *,
    frozen: bool = False,
    kw_only: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
    autocast: bool = False,
    nocast: bool = False,
) -> Callable[[_C], _C]: ...
@dataclass_transform(field_specifiers=(field, dataclasses.field, Field, dataclasses.Field))
def tensorclass(
    cls: Any = None,
    /,
    *,
    frozen: bool = False,
    kw_only: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
    autocast: bool = False,
    nocast: bool = False,
) -> Any:
    """Make a tensorclass of ``cls``: a new class with the same name, body and bases, plus
    ``TensorClass`` as the last base.

    Args:
        frozen: assigning a field raises ``dataclasses.FrozenInstanceError`` (the
            tensors themselves stay writable: use ``lock_()``/``memmap_()`` for that).
        kw_only: the class's own fields are keyword-only in ``__init__``.
        shadow: let fields take the names of the convenience tensor methods
            (``mean``, ``std``, ``sum``, ``log``, ``float``...; tensordict's option of the
            same name). The field then hides the method on this class. Names the library
            itself relies on (``apply``, ``to``, ``batch_size``...) stay refused.
        tensor_only: every field holds tensors or containers (refused at class creation
            otherwise); values of tensor fields are converted with ``torch.as_tensor``.
        autocast: cast every value set to a field to the field's annotation (tensordict's
            switch).
        nocast: store every value as given (numbers and numpy arrays are not made
            tensors, simple annotations are not checked).

    >>> import torch
    >>> @tensorclass(frozen=True)
    ... class Point:
    ...     xy: torch.Tensor
    >>> p = Point(torch.zeros(5, 2), batch_size=[5])
    >>> p.xy = torch.ones(5, 2)
    Traceback (most recent call last):
      ...
    dataclasses.FrozenInstanceError: cannot assign to field 'xy' of frozen Point; use .replace(xy=...) for a changed copy
    """

    # False is "not given" here (None): a subclass keeps what its base class chose.
    given = (tensor_only or None, autocast or None, nocast or None)
    options = class_options("@tensorclass", frozen, kw_only, shadow, *given)

    def wrap(c: Any) -> Any:
        return _make(c, options)

    return wrap if cls is None else wrap(cls)


def _make(cls: type, options: dict[str, Any]) -> type:
    if not isinstance(cls, type):
        raise TypeError(f"@tensorclass decorates a class, got {cls!r}")
    if issubclass(cls, TensorClass):
        # Already built by TensorClass.__init_subclass__ (it subclasses a tensorclass):
        # rebuild in place with these options.
        build_class(cls, TensorClass, options)
        return cls
    if "__dataclass_fields__" in cls.__dict__:
        raise TypeError(
            f"{cls.__qualname__} is already a dataclass: remove @dataclass, @tensorclass "
            "replaces it (same fields, defaults and __post_init__)"
        )
    ns = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
    ns["__qualname__"] = cls.__qualname__  # read by the build (registry key) before we return
    for slot in _slot_names(cls):
        ns.pop(slot, None)  # member descriptors of the old class; __slots__ recreates them
    bases = (*(b for b in cls.__bases__ if b is not object), TensorClass)
    new = types.new_class(
        cls.__name__,
        bases,
        options,
        lambda body: body.update(ns),
    )
    _rebind_class_cells(new, cls)
    return new


def _slot_names(cls: type) -> list[str]:
    slots = cls.__dict__.get("__slots__", ())
    return [slots] if isinstance(slots, str) else list(slots)


def _rebind_class_cells(new: type, old: type) -> None:
    """Methods using zero-argument ``super()`` or ``__class__`` close over the class
    object they were defined in: point those cells at the new class (as attrs and
    dataclasses(slots=True) do), else ``super()`` would fail with a TypeError."""
    for member in new.__dict__.values():
        funcs: list[Any] = []
        if isinstance(member, (classmethod, staticmethod)):
            funcs.append(member.__func__)
        elif isinstance(member, property):
            funcs += [member.fget, member.fset, member.fdel]
        else:
            funcs.append(member)
        for fn in funcs:
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    if cell.cell_contents is old:
                        cell.cell_contents = new
                except ValueError:  # an empty cell
                    pass
