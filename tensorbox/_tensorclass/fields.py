"""Tensorclass fields: the ``field()`` spec, collecting a class's fields, and refusals.

Fields are ``dataclasses.Field`` objects, so ``dataclasses.fields``, ``replace`` and
``asdict`` work on every tensorclass. A class's fields are its bases' (in MRO
order), then its own annotations; what would break later is refused here, at class
creation, naming the fix: a field named like a container member, a mutable
default, a required field after a defaulted one, an ``InitVar``.

>>> import torch
>>> from tensorbox import TensorClass
>>> class P(TensorClass):
...     x: torch.Tensor
...     tag: str = "p"
>>> [f.name for f in fields(P)]
['x', 'tag']
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import itertools
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, get_origin, overload

import numpy as np
from torch import Tensor

from tensorbox.errors import FieldNameError

__all__ = [
    "FIELD_MAY_HIDE",
    "MISSING",
    "SHADOWABLE",
    "Field",
    "collect_fields",
    "field",
    "fields",
    "reserved_names",
    "shadowable_names",
]

_T = TypeVar("_T")
MISSING: Any = dataclasses.MISSING
Field = dataclasses.Field


@overload
def field(
    *,
    default: _T,
    init: bool = True,
    repr: bool = True,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = None,
) -> _T: ...
@overload
def field(
    *,
    default_factory: Callable[[], _T],
    init: bool = True,
    repr: bool = True,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = None,
) -> _T: ...
@overload
def field(
    *,
    init: bool = True,
    repr: bool = True,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = None,
) -> Any: ...
def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    kw_only: Any = MISSING,
    metadata: Mapping[str, Any] | None = None,
) -> Any:
    """Declare a field's default, as ``dataclasses.field`` (which is accepted too).

    ``default_factory`` is called once per construction: use it for lists, dicts and
    arrays, which would otherwise be shared by every instance (they are refused as a
    ``default``). A tensor or container ``default`` is copied for each instance.

    >>> import torch
    >>> from tensorbox import TensorClass, field
    >>> class Run(TensorClass):
    ...     loss: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
    ...     tags: list = field(default_factory=list)
    >>> Run().tags
    []
    """
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("field() takes default or default_factory, not both")
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        kw_only=kw_only,
        metadata=metadata,
    )


def fields(class_or_instance: Any) -> tuple[Field[Any], ...]:
    """The fields of a tensorclass (or of an instance), in ``__init__`` order: the same
    as ``dataclasses.fields`` (``batch_size`` and ``device`` are not fields).

    >>> import torch; from tensorbox import TensorClass, fields
    >>> class Pair(TensorClass):
    ...     a: torch.Tensor
    ...     label: str = "none"
    >>> [f.name for f in fields(Pair)]
    ['a', 'label']
    """
    cls = class_or_instance if isinstance(class_or_instance, type) else type(class_or_instance)
    try:
        out: tuple[Field[Any], ...] = cls.__dict__["__tc_fields__"]
        return out
    except KeyError:
        raise TypeError(f"{cls.__name__!r} is not a tensorclass") from None


def has_default(f: Field[Any]) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _copy_field(f: Field[Any], **changes: Any) -> Field[Any]:
    out = copy.copy(f)
    for k, v in changes.items():
        setattr(out, k, v)
    return out


# ------------------------------------------------------------- collecting


def _own_annotations(cls: type) -> dict[str, Any]:
    if sys.version_info >= (3, 14):  # pragma: no cover - lazy annotations
        import annotationlib

        return annotationlib.get_annotations(cls, format=annotationlib.Format.FORWARDREF)
    return dict(inspect.get_annotations(cls))


def _is_classvar(ann: Any) -> bool:
    if isinstance(ann, str):  # ``from __future__ import annotations``
        head = ann.replace(" ", "").split("[", 1)[0]
        return head in ("ClassVar", "typing.ClassVar", "t.ClassVar")
    return ann is ClassVar or get_origin(ann) is ClassVar


def _is_kw_only_marker(ann: Any) -> bool:
    if isinstance(ann, str):
        return ann in ("KW_ONLY", "dataclasses.KW_ONLY")
    return ann is dataclasses.KW_ONLY


def _is_initvar(ann: Any) -> bool:
    if isinstance(ann, str):
        return ann.startswith(("InitVar", "dataclasses.InitVar"))
    return ann is dataclasses.InitVar or isinstance(ann, dataclasses.InitVar)


def _own_fields(cls: type, reserved: Mapping[str, str]) -> list[Field[Any]]:
    """Fields declared in ``cls``'s own body, checked; class attributes hold the defaults."""
    out: list[Field[Any]] = []
    kw_only_from_here = False
    name = cls.__qualname__
    for fname, ann in _own_annotations(cls).items():
        if _is_classvar(ann):
            continue
        if _is_kw_only_marker(ann):
            kw_only_from_here = True
            continue
        if _is_initvar(ann):
            raise TypeError(
                f"{name}.{fname}: InitVar fields are not supported by tensorclasses; "
                "write a classmethod constructor that computes the fields instead"
            )
        if fname.startswith("__") and fname.endswith("__"):
            raise TypeError(
                f"{name}: a field cannot be named {fname!r} (dunder names are Python's)"
            )
        if fname in reserved:
            hint = (
                ", or pass shadow=True to let the field hide this convenience method"
                if fname in shadowable_names()
                else ""
            )
            raise FieldNameError(
                f"{name}: field {fname!r} clashes with the {reserved[fname]} "
                f"TensorClass.{fname}; a field must not hide a container member. "
                f"Rename it (for example {fname + '_'!r}){hint}"
            )
        value = cls.__dict__.get(fname, MISSING)
        if isinstance(value, Field):
            spec = _copy_field(value)
        elif isinstance(value, (types.FunctionType, property, classmethod, staticmethod)):
            raise TypeError(
                f"{name}: {fname!r} is annotated as a field but also defined as a "
                f"{type(value).__name__} in the class body; rename one of them"
            )
        else:
            spec = dataclasses.field(default=value)
        if isinstance(spec.default, Tensor) or getattr(
            type(spec.default), "_is_tensor_collection", False
        ):
            # tensordict accepts a tensor default; each instance gets its own copy, so an
            # in-place write to one instance's field never reaches the others.
            spec.default_factory = _copy_of(spec.default)
            spec.default = MISSING
        _check_default(name, fname, spec.default)
        if spec.kw_only is MISSING:
            spec.kw_only = kw_only_from_here or None  # type: ignore[assignment]  # None: the class option decides
        spec.name = fname
        spec.type = ann
        spec._field_type = dataclasses._FIELD  # type: ignore[attr-defined]
        out.append(spec)
    return out


def _copy_of(default: Any) -> Callable[[], Any]:
    def factory() -> Any:
        return default.clone()

    factory.__qualname__ = factory.__name__ = "copy_of_the_default"
    return factory


def _check_default(cls_name: str, fname: str, default: Any) -> None:
    if default is MISSING:
        return
    if isinstance(default, (list, dict, set, np.ndarray)):
        raise ValueError(
            f"{cls_name}.{fname}: a {type(default).__name__} default would be shared by "
            f"every instance; use field(default_factory=...) instead, e.g. "
            f"field(default_factory=lambda: torch.zeros(3)) or field(default_factory=list)"
        )


def collect_fields(cls: type, kw_only: bool, reserved: Mapping[str, str]) -> tuple[Field[Any], ...]:
    """All fields of ``cls``: the bases' (in MRO order), then its own."""
    merged: dict[str, Field[Any]] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get("__tc_fields__", ()):
            merged[f.name] = f
    own = cls.__dict__.get("__tc_own__")
    if own is None:
        own = _own_fields(cls, reserved)
        cls.__tc_own__ = own  # type: ignore[attr-defined]
    for f in own:
        merged[f.name] = _copy_field(f, kw_only=kw_only if f.kw_only is None else f.kw_only)
    result = tuple(merged.values())
    positional = [f for f in result if f.init and not f.kw_only]
    for prev, cur in itertools.pairwise(positional):
        if has_default(prev) and not has_default(cur):
            raise TypeError(
                f"{cls.__qualname__}: field {cur.name!r} has no default but comes after "
                f"{prev.name!r}, which has one; give {cur.name!r} a default, or make it "
                "keyword-only (field(kw_only=True), or the class option kw_only=True)"
            )
    for f in result:
        if not f.init and not has_default(f):
            raise TypeError(
                f"{cls.__qualname__}: field {f.name!r} has init=False and no default; "
                "give it a default or a default_factory"
            )
    return result


#: Container members a field may hide with ``shadow=True``: convenience methods the
#: library never calls on a tensorclass itself, so hiding one only changes what the user
#: sees. Written out, not derived from which mixin defines a method, so that moving a
#: method between the container's mixins cannot change which field names users may
#: declare; adding a name here is a decision about the public API.
SHADOWABLE: frozenset[str] = frozenset(
    {
        "abs",
        "add",
        "all_gather",
        "all_reduce",
        "all_reduce_",
        "amax",
        "amin",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "auto_batch_size_",
        "backward",
        "bfloat16",
        "bool",
        "broadcast",
        "broadcast_",
        "broadcast_to",
        "cat_from_tensordict",
        "cat_tensors",
        "clamp",
        "clear",
        "consolidate",
        "copy_at_",
        "create_nested",
        "cummax",
        "cummin",
        "data_ptr",
        "depth",
        "div",
        "double",
        "dtype",
        "empty",
        "entry_class",
        "exp",
        "expand_as",
        "filter_empty_",
        "filter_non_tensor_data",
        "flip",
        "fliplr",
        "flipud",
        "float",
        "from_consolidated",
        "from_modules",
        "from_namedtuple",
        "from_remote_init",
        "fromkeys",
        "gather",
        "get_at",
        "get_item_shape",
        "get_non_tensor",
        "grad",
        "half",
        "init_remote",
        "int",
        "irecv",
        "is_consolidated",
        "is_non_tensor",
        "isend",
        "isfinite",
        "isinf",
        "isnan",
        "isneginf",
        "isposinf",
        "isreal",
        "log",
        "log_softmax",
        "logsumexp",
        "long",
        "masked_fill",
        "masked_fill_",
        "masked_select",
        "max",
        "maybe_dense_stack",
        "mean",
        "min",
        "moveaxis",
        "movedim",
        "mul",
        "names",
        "nanmean",
        "nansum",
        "ndimension",
        "new_empty",
        "new_full",
        "new_ones",
        "new_tensor",
        "new_zeros",
        "numpy",
        "popitem",
        "pow",
        "prod",
        "quantile",
        "recv",
        "repeat",
        "repeat_interleave",
        "replace",
        "roll",
        "rot90",
        "send",
        "set_at_",
        "set_non_tensor",
        "setdefault",
        "sigmoid",
        "softmax",
        "sorted_keys",
        "split_keys",
        "sqrt",
        "stack_from_tensordict",
        "stack_tensors",
        "std",
        "sub",
        "sum",
        "swapaxes",
        "swapdims",
        "tensor_split",
        "tile",
        "to_lazystack",
        "to_namedtuple",
        "tolist",
        "type",
        "update_at_",
        "var",
        "where",
        "zero_grad",
    }
)

#: Members a field may take even without ``shadow=True``: the library never reads them on a
#: container, and all are common field names (a depth map, a list of names, a record's
#: payload: tensordict's own saving guide names a field ``data``). The field then wins.
FIELD_MAY_HIDE: frozenset[str] = frozenset({"data", "depth", "names"})


def shadowable_names() -> frozenset[str]:
    """The names a field may hide with ``shadow=True`` (:data:`SHADOWABLE`).

    >>> "mean" in shadowable_names(), "apply" in shadowable_names()
    (True, False)
    """
    return SHADOWABLE


def reserved_names(base: type) -> Mapping[str, str]:
    """Names a field may not take, with what they are on the base class."""
    out: dict[str, str] = {}
    for name in dir(base):
        if (name.startswith("__") and name.endswith("__")) or name in FIELD_MAY_HIDE:
            continue
        member = getattr(base, name, None)
        if isinstance(base.__dict__.get(name), property) or name in ("batch_size", "device"):
            out[name] = "property"
        elif callable(member):
            out[name] = "method"
        else:
            out[name] = "attribute"
    for slot in ("_tensordict", "_batch_size", "_device", "_locked"):
        out[slot] = "storage slot"
    return types.MappingProxyType(out)
